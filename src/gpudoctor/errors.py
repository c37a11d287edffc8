"""The one user-facing error type. Standard library only; importable from every layer."""


class GpuDoctorUserError(ValueError):
    """Bad input from the user. The message says what is wrong and what to do instead.

    The CLI prints it without a traceback and exits with code 2.
    """

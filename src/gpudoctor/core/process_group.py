"""Run a launcher (torchrun, ``gpudoctor run``) so that a timeout leaves no process behind.

``subprocess.run(..., timeout=...)`` kills only the process it started. torchrun's workers are its
children: killed alone, it leaves ranks holding their GPUs (and their port) for the next launch.
Here the command gets its own process group and the whole group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def run_process_group(cmd: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
                      cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (a list, no shell) in a new process group, capturing stdout and stderr as text.

    On a timeout, or any exception while waiting (Ctrl-C included: the new group does not get the
    terminal's SIGINT), every process of the group is killed with SIGKILL and reaped before the
    exception propagates; a timeout raises :class:`subprocess.TimeoutExpired`, as
    ``subprocess.run`` does. Only the group this call started is signalled.
    """
    proc = subprocess.Popen(list(cmd), env=None if env is None else dict(env), cwd=cwd, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # pgid == proc.pid
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is already gone
        out, err = proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise subprocess.TimeoutExpired(proc.args, timeout_s, output=out, stderr=err) from None
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

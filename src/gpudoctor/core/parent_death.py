"""A child that ends with its parent: ``kill -9`` of gpudoctor must not leave the training script
running (and holding its GPUs) under init.

On Linux the child asks the kernel, before it runs the command, for a signal when its parent
dies (``prctl(PR_SET_PDEATHSIG)``). SIGTERM, not SIGKILL: a launcher such as torchrun then stops
its own workers, and a script may save a checkpoint. Elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that arms ``sig`` for the parent's death, or
    ``None`` where the platform has no such call. libc is looked up here, in the parent: the
    function that runs in the forked child only makes the system call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    number = int(sig)

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, number, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), number)

    return arm

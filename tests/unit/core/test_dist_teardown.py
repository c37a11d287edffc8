"""``wait_for_idle_threads``: what ``destroy_distributed`` waits on before a gloo process may exit."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gpudoctor.core.dist import destroy_distributed, wait_for_idle_threads

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")


def test_sleeping_threads_count_as_idle() -> None:
    done = threading.Event()
    waiter = threading.Thread(target=done.wait)  # blocked, like gloo's workers between collectives
    waiter.start()
    try:
        start = time.monotonic()
        assert wait_for_idle_threads(timeout_s=2.0)
        assert time.monotonic() - start < 1.0
    finally:
        done.set()
        waiter.join()


def test_a_thread_that_keeps_running_ends_the_wait_at_the_timeout() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        start = time.monotonic()
        assert not wait_for_idle_threads(timeout_s=0.2)
        assert 0.2 <= time.monotonic() - start < 5.0
    finally:
        stop.set()
        spinner.join()


def test_a_thread_waiting_for_the_gil_gets_it_during_the_wait() -> None:
    """The case that matters: a thread that must take the GIL to finish (as gloo's worker does to
    release a collective's tensors) finishes inside the wait, not during interpreter shutdown."""
    finished = []

    def release() -> None:
        finished.append(True)  # a moment of Python work: needs the GIL

    worker = threading.Thread(target=release)
    worker.start()
    assert wait_for_idle_threads(timeout_s=5.0)
    assert finished == [True]
    worker.join()


def test_nothing_to_leave_without_a_group() -> None:
    destroy_distributed()  # no process group: returns at once, no barrier

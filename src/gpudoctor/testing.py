"""Test helpers for CI: fail a test when a training step synchronises with the host or leaks memory.

::

    from gpudoctor.testing import assert_no_leak, assert_no_sync

    def test_train_step_stays_on_the_gpu():
        assert_no_sync(train_step, steps=3)      # no .item(), .cpu(), print(tensor), sync ...

    def test_train_step_does_not_leak():
        assert_no_leak(train_step, steps=20)     # memory flat from step to step

Both take ``step_fn``, a function of no arguments that runs one training step (a closure over
the model, the optimizer and a batch), run it ``warmup`` times unobserved (first-step
allocations, lazy initialisation, cuDNN autotuning), then observe ``steps`` calls.

How each one sees the problem:

* :func:`assert_no_sync` on CUDA turns on PyTorch's own detector, ``torch.cuda.set_sync_debug_mode("warn")``,
  for the observed steps (it flags ``.item()``, ``.cpu()``, ``.tolist()``, ``nonzero``, a
  boolean mask index, a blocking device-to-host copy, ...) and counts explicit
  ``torch.cuda.synchronize()`` calls; on a machine without CUDA it flags the calls that *read a
  tensor on the host* — ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``bool(t)``,
  printing a tensor — each of which is a host-device sync once the step runs on a GPU. The
  failure lists where each one happened (file:line) and how often.
* :func:`assert_no_leak` reads the memory the step's tensors hold after each step: the CUDA
  caching allocator's ``memory_allocated()`` (exact, host-side) when the step uses CUDA, else
  the process's resident memory (psutil RSS: coarser, so the CPU threshold is larger). It fails
  when memory grows by more than ``max_growth_bytes`` per step between the first and the last
  quarter of the observed steps (medians, so one spike is not a leak; a leak every other step
  still is).

As a pytest plugin (``pytest_plugins = ["gpudoctor.testing"]`` in ``conftest.py``) it adds the
fixtures ``no_sync`` and ``no_leak``, the two functions. Nothing here is imported by
``import gpudoctor``; torch is imported when a helper runs.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

CUDA_LEAK_BYTES = 4 * 1024  # per step: the allocator is exact, a steady step returns to the same figure
CPU_LEAK_BYTES = 1024 * 1024  # per step: RSS moves with malloc's arenas and Python's own objects
HOST_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__repr__", "__format__")
_SYNC_WARNING = "synchronizing CUDA operation"
_FIX = ("keep per-step values on the device (total += loss.detach()) and read them every N steps; "
        "log with non_blocking copies; avoid boolean-mask indexing and .nonzero() in the step")


def _uses_cuda(torch: Any) -> bool:
    return bool(torch.cuda.is_available() and torch.cuda.is_initialized())


def _in_torch(filename: str) -> bool:
    return "/torch/" in filename.replace("\\", "/")


def _where(frame: Any) -> str:
    """The first frame outside torch and this module: where the user's code made the call."""
    while frame is not None:
        name = frame.f_code.co_filename
        if f"{__name__.replace('.', '/')}.py" not in name and not _in_torch(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _HostReads:
    """Wrap the Tensor methods that read values on the host; count calls by (method, place)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.calls: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}
        self._inside = False

    def __enter__(self) -> _HostReads:
        tensor = self.torch.Tensor
        for name in HOST_READS:
            self._saved[name] = tensor.__dict__.get(name, _MISSING)
            setattr(tensor, name, self._wrap(name, getattr(tensor, name)))
        return self

    def _wrap(self, name: str, inner: Any) -> Any:
        reads = self

        def read(self_: Any, *args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if reads._inside or _in_torch(caller.f_code.co_filename):
                # printing calls .item()/.tolist() inside (one read); torch's own host reads of
                # host tensors (Adam's step count) are no syncs
                return inner(self_, *args, **kwargs)
            reads._inside = True
            try:
                reads.calls[f"{_where(caller)} (Tensor.{name})"] += 1
                return inner(self_, *args, **kwargs)
            finally:
                reads._inside = False

        read.__name__, read.__wrapped__ = name, inner  # type: ignore[attr-defined]
        return read

    def __exit__(self, *exc: Any) -> None:
        tensor = self.torch.Tensor
        for name, value in self._saved.items():
            if value is _MISSING:
                delattr(tensor, name)
            else:
                setattr(tensor, name, value)


_MISSING = object()


class _CudaSyncs:
    """``set_sync_debug_mode("warn")`` plus explicit ``synchronize()`` calls, by place."""

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda
        self.calls: Counter[str] = Counter()

    def __enter__(self) -> _CudaSyncs:
        self._mode = self.cuda.get_sync_debug_mode()
        self._sync = self.cuda.synchronize
        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        inner, calls = self._sync, self.calls

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            calls[f"{_where(sys._getframe(1))} (torch.cuda.synchronize)"] += 1
            return inner(*args, **kwargs)

        self.cuda.synchronize = synchronize
        self.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cuda.set_sync_debug_mode(self._mode)
        self.cuda.synchronize = self._sync
        self._catch.__exit__(*exc)
        for w in self._caught:
            if _SYNC_WARNING in str(w.message) and "/torch/amp/" in w.filename.replace("\\", "/"):
                continue  # GradScaler's found-inf check: the price of fp16 loss scaling, not a mistake
            if _SYNC_WARNING in str(w.message):
                self.calls[f"{w.filename}:{w.lineno} (synchronizing CUDA operation)"] += 1
            else:  # someone else's warning: let it through
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _run(step_fn: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        step_fn()


def assert_no_sync(step_fn: Callable[[], Any], *, steps: int = 3, warmup: int = 1,
                   device: str = "auto", torch_module: Any = None) -> None:
    """Fail (``AssertionError``) when ``step_fn`` synchronises with the host during ``steps`` calls.

    Args:
        step_fn: one training step, no arguments.
        steps: observed calls, after ``warmup`` unobserved ones.
        device: ``"cuda"`` (PyTorch's sync detector), ``"cpu"`` (host reads of any tensor), or
            ``"auto"``: CUDA when the warm-up initialised it.
        torch_module: the torch to use (tests pass a stand-in); default ``import torch``.
    """
    torch = torch_module if torch_module is not None else __import__("torch")
    _run(step_fn, warmup)
    cuda = device == "cuda" or (device == "auto" and _uses_cuda(torch))
    guard: Any = _CudaSyncs(torch.cuda) if cuda else _HostReads(torch)
    with guard:
        _run(step_fn, steps)
    if guard.calls:
        total = sum(guard.calls.values())
        places = "\n".join(f"  {n} x {place}" for place, n in guard.calls.most_common())
        what = "synchronised with the host" if cuda else "read tensors on the host (a sync on a GPU)"
        raise AssertionError(f"the step {what} {total} times in {steps} steps:\n{places}\nfix: {_FIX}")


def _memory_reader(torch: Any, device: str) -> tuple[Callable[[], int], int, str]:
    if device == "cuda" or (device == "auto" and _uses_cuda(torch)):
        return torch.cuda.memory_allocated, CUDA_LEAK_BYTES, "CUDA memory allocated"
    import psutil

    process = psutil.Process()
    return (lambda: int(process.memory_info().rss)), CPU_LEAK_BYTES, "resident host memory (RSS)"


def _median(values: list[int]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def growth_per_step(samples: list[int]) -> float:
    """Bytes per step between the median of the first and of the last quarter of ``samples``
    (one reading after each step)."""
    if len(samples) < 4:
        raise ValueError("need at least 4 observed steps to tell growth from noise")
    q = max(1, len(samples) // 4)
    head, tail = samples[:q], samples[-q:]
    distance = (len(samples) - q) if q > 1 else len(samples) - 1
    return (_median(tail) - _median(head)) / distance


def assert_no_leak(step_fn: Callable[[], Any], steps: int = 20, *, warmup: int = 3,
                   max_growth_bytes: int | None = None, device: str = "auto",
                   memory: Callable[[], int] | None = None, torch_module: Any = None) -> None:
    """Fail (``AssertionError``) when memory grows by more than ``max_growth_bytes`` per step.

    Args:
        step_fn: one training step, no arguments.
        steps: observed calls (at least 4), after ``warmup`` unobserved ones.
        max_growth_bytes: allowed growth per step; default 4 KiB on CUDA, 1 MiB for host RSS.
        device: ``"cuda"``, ``"cpu"`` or ``"auto"`` (CUDA when the warm-up initialised it).
        memory: read the memory yourself (bytes); overrides ``device``'s reader.
        torch_module: the torch to use; default ``import torch``.
    """
    if steps < 4:
        raise ValueError(f"steps={steps}: observe at least 4 steps")
    torch = torch_module if torch_module is not None else __import__("torch")
    _run(step_fn, warmup)
    read, default, what = _memory_reader(torch, device) if memory is None else (memory, CPU_LEAK_BYTES, "memory")
    limit = default if max_growth_bytes is None else max_growth_bytes
    gc.collect()  # what the warm-up left in reference cycles goes now, not during the steps
    samples = []
    for _ in range(steps):
        step_fn()
        samples.append(int(read()))
    growth = growth_per_step(samples)
    if growth > limit:
        raise AssertionError(
            f"{what} grew by {growth / 1024:.1f} KiB per step over {steps} steps "
            f"({samples[0] / 2**20:.1f} -> {samples[-1] / 2**20:.1f} MiB; allowed {limit / 1024:.1f} KiB/step). "
            "Usual causes: keeping the loss or outputs with their graph (total += loss instead of "
            "loss.detach() or loss.item() every N steps), appending tensors to a list every step, a "
            "cache keyed by batch. Find it with `gpudoctor memory run -- python train.py`.")


# ---- pytest plugin: pytest_plugins = ["gpudoctor.testing"] ------------------------------------

try:
    import pytest as _pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    _pytest = None

if _pytest is not None:

    @_pytest.fixture
    def no_sync() -> Callable[..., None]:
        """The :func:`assert_no_sync` helper as a fixture."""
        return assert_no_sync

    @_pytest.fixture
    def no_leak() -> Callable[..., None]:
        """The :func:`assert_no_leak` helper as a fixture."""
        return assert_no_leak


__all__ = ["assert_no_leak", "assert_no_sync", "growth_per_step"]

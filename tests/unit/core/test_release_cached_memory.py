"""core.memory.release_cached_memory: the one way trials, the OOM recovery and benchmarks free memory."""

from __future__ import annotations

import gc
import weakref

import torch

from gpudoctor.core.memory import release_cached_memory


class Holder:
    pass


def test_it_collects_a_cycle_and_leaves_cuda_uninitialised(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    gc.disable()  # only the helper may collect the cycle below
    try:
        a, b = Holder(), Holder()
        a.other, b.other = b, a  # a cycle: reference counting alone never frees it
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None
        release_cached_memory()
        assert gone() is None
    finally:
        gc.enable()
    assert not torch.cuda.is_initialized() and emptied == []


def test_it_empties_the_cache_when_cuda_is_in_use(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    release_cached_memory()
    assert emptied == [1]

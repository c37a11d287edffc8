"""After the profiler window, the probes ask Kineto to detach CUPTI (later steps run unobserved)."""

from __future__ import annotations

import os

import pytest
import torch

from gpudoctor.collectors.instrument import probes


def _unset(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # setenv first: monkeypatch then restores the original state (even "absent") afterwards,
    # including whatever the code under test wrote there
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)


@pytest.fixture
def cuda_env(monkeypatch: pytest.MonkeyPatch):
    _unset(monkeypatch, "TEARDOWN_CUPTI")
    _unset(monkeypatch, "DISABLE_CUPTI_LAZY_REINIT")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    return monkeypatch


def test_sets_teardown_on_recent_cuda(cuda_env: pytest.MonkeyPatch) -> None:
    cuda_env.setattr(torch.version, "cuda", "12.8")
    probes._let_cupti_tear_down()
    assert os.environ["TEARDOWN_CUPTI"] == "1"


@pytest.mark.parametrize(
    ("cuda", "env", "expected"),
    [
        ("12.4", {}, None),  # teardown and CUDA graphs crash together before 12.6
        ("13.0", {"TEARDOWN_CUPTI": "0"}, "0"),  # the user's (or torch's) choice stands
        ("13.0", {"DISABLE_CUPTI_LAZY_REINIT": "1"}, None),  # torch saw CUDA graphs
        (None, {}, None),  # a build without CUDA
    ],
)
def test_leaves_it_alone(cuda_env: pytest.MonkeyPatch, cuda: str | None, env: dict, expected: str | None) -> None:
    cuda_env.setattr(torch.version, "cuda", cuda)
    for key, value in env.items():
        cuda_env.setenv(key, value)
    probes._let_cupti_tear_down()
    assert os.environ.get("TEARDOWN_CUPTI") == expected


def test_cpu_window_leaves_it_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, "TEARDOWN_CUPTI")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    probes._let_cupti_tear_down()
    assert "TEARDOWN_CUPTI" not in os.environ

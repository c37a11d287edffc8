"""``--try`` knob parsing, validation and what they change."""

from __future__ import annotations

import pytest

from gpudoctor.collectors.knobs import Knob, child_env, loader_kwargs, parse_knobs
from gpudoctor.errors import GpuDoctorUserError


def test_model_knobs_parse() -> None:
    assert [str(k) for k in parse_knobs("bf16,channels-last,compile,non_blocking")] == [
        "bf16", "channels_last", "compile", "non_blocking"]


def test_parse_several_knobs() -> None:
    knobs = parse_knobs("num_workers=8, pin_memory,persistent-workers,prefetch_factor=4")
    assert [str(k) for k in knobs] == ["num_workers=8", "pin_memory", "persistent_workers", "prefetch_factor=4"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("num_wrkers=8", "unknown knob 'num_wrkers'"),
        ("num_workers", "needs a value, e.g. num_workers=8"),
        ("tf32=1", "takes no value"),
        ("num_workers=-1", "must be at least 0"),
        ("prefetch_factor=0", "must be at least 1"),
        ("num_workers=eight", "'eight' is not a whole number"),
        ("tf32,tf32", "given twice"),
        (" , ", "at least one knob"),
        ("bf16,fp16", "exclude each other"),
        ("bf16=1", "takes no value"),
    ],
)
def test_bad_specs_say_what_to_fix(spec: str, message: str) -> None:
    with pytest.raises(GpuDoctorUserError, match=message):
        parse_knobs(spec)


def test_knob_validates_itself() -> None:
    with pytest.raises(ValueError, match="choose from"):
        Knob(name="batch_size", value=64)


def test_loader_kwargs_apply_and_stay_valid() -> None:
    knobs = {"num_workers": 4, "pin_memory": None, "persistent_workers": None, "prefetch_factor": 6}
    out = loader_kwargs({"batch_size": 32, "num_workers": 0}, knobs, iterable=False)
    assert out == {"batch_size": 32, "num_workers": 4, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 6}
    # an IterableDataset keeps its worker count (more workers would repeat the data)
    assert loader_kwargs({"num_workers": 0}, {"num_workers": 4}, iterable=True) == {"num_workers": 0}
    # persistent_workers / prefetch_factor without workers would make DataLoader raise
    assert loader_kwargs({}, {"persistent_workers": None, "prefetch_factor": 2}, iterable=False) == {}
    forced = loader_kwargs({"num_workers": 4, "persistent_workers": True, "prefetch_factor": 2},
                           {"num_workers": 0}, iterable=False)
    assert forced == {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None}


def test_child_env_merges_alloc_conf() -> None:
    env = child_env(parse_knobs("expandable_segments,tf32"),
                    {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:False"})
    assert env == {
        "GPUDOCTOR_KNOBS": "expandable_segments,tf32",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True",
    }
    assert child_env(parse_knobs("num_workers=2"), {}) == {"GPUDOCTOR_KNOBS": "num_workers=2"}

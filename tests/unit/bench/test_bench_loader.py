"""DataLoader throughput: resolving the dataset and timing a tiny one on the CPU."""

from __future__ import annotations

import textwrap

import pytest

from gpudoctor.bench.loader import WARMUP_BATCHES, WINDOWS, load_dataset, run_loader
from gpudoctor.errors import GpuDoctorUserError

SCRIPT = textwrap.dedent(
    """
    import torch
    from torch.utils.data import TensorDataset

    def dataset():
        return TensorDataset(torch.arange(256, dtype=torch.float32).reshape(256, 1))

    small = TensorDataset(torch.zeros(4, 1))
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "my_data.py"
    path.write_text(SCRIPT)
    return path


def test_script_path_defaults_to_dataset_function(script) -> None:
    assert len(load_dataset(str(script))) == 256
    assert len(load_dataset(f"{script}:small")) == 4


def test_module_function_form(script, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(script.parent))
    assert len(load_dataset("my_data:dataset")) == 256


@pytest.mark.parametrize("spec,message", [
    ("no/such/file.py", "does not exist"),
    ("json", "names no function"),
    ("no_such_module_xyz:ds", "cannot import"),
    ("json:no_such_name", "defines no 'no_such_name'"),
    ("json:dumps", "must take no arguments"),
    ("math:pi", "not a Dataset"),
])
def test_bad_dataset_names_say_the_accepted_forms(spec, message) -> None:
    with pytest.raises(GpuDoctorUserError, match=message) as info:
        load_dataset(spec)
    assert "package.module:function or path/to/script.py[:name]" in str(info.value)


def test_run_loader_times_each_worker_setting(script) -> None:
    results = run_loader(load_dataset(str(script)), workers=(0,), batch_size=8, batches=WARMUP_BATCHES + WINDOWS * 2)
    (r,) = results
    assert r.section == "loader" and r.size == "workers=0" and r.unit == "samples/s"
    assert r.repeats == WINDOWS and r.median > 0 and r.p10 <= r.median <= r.p90
    assert "batch 8, 2 batches per window" in r.note


def test_too_small_dataset_is_a_user_error(script) -> None:
    with pytest.raises(GpuDoctorUserError, match="lower --batch-size"):
        run_loader(load_dataset(f"{script}:small"), workers=(0,), batch_size=2)

"""``gpudoctor tune batch`` under torchrun: 2 gloo ranks on the CPU whose memory differs; both
search on their own and agree on the smallest result (all-reduce MIN)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = Path(__file__).resolve().parents[1] / "unit" / "tune" / "tiny_target.py"


@pytest.mark.distributed
def test_ranks_agree_on_the_smallest_batch(tmp_path: Path) -> None:
    out = tmp_path / "tuned.toml"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gpudoctor",
           "tune", "batch", "--target", f"{TARGET}:uneven_target", "--json", "--steps", "2", "--window-s", "0", "--out", str(out), "--pick-batch", "max"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert result["world_size"] == 2
    knob = next(k for k in result["knobs"] if k["knob"] == "batch")
    assert knob["params"]["max_batch_size"] == 57  # rank 1: largest fit 60, 5% margin; rank 0 alone would say 95
    assert any("ranks found [95, 57]" in note for note in knob["notes"]), knob["notes"]
    from gpudoctor.train import TrainConfig

    if result["kept_start"]:  # the confirmation (DDP on two CPU processes) found no gain beyond the noise
        assert not out.exists() and result["config"]["batch_size"] == 16
    else:
        assert TrainConfig.from_file(out).batch_size == knob["params"]["batch_size"] in (16, 57)


@pytest.mark.distributed
def test_ddp_knob_measures_buckets_and_hooks(tmp_path: Path) -> None:
    out = tmp_path / "ddp.toml"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gpudoctor",
           "tune", "ddp", "--target", f"{TARGET}:target", "--json", "--steps", "2", "--window-s", "0", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    knob = next(k for k in result["knobs"] if k["knob"] == "ddp")
    settings = [t["setting"] for t in knob["trials"]]
    assert settings[:4] == [f"bucket_cap_mb={b} hook=none" for b in (25, 10, 50, 100)]
    # then no hook, fp16 and bf16 at the chosen size, 3 interleaved rounds in a rotating order
    bucket = knob["params"]["parallel.bucket_cap_mb"]
    hooks = [s.removeprefix(f"bucket_cap_mb={bucket:g} hook=") for s in settings[4:]]
    assert hooks == ["none round 1", "fp16 round 1", "bf16 round 1", "fp16 round 2", "bf16 round 2",
                     "none round 2", "bf16 round 3", "none round 3", "fp16 round 3"]
    assert knob["winner"] in settings
    # the hooks are registered by the engine (parallel.comm_hook) and ran on gloo
    assert {t["verdict"] for t in knob["trials"]} == {"ok"}, [(t["setting"], t["reason"]) for t in knob["trials"]]
    assert any("median of 3 interleaved rounds" in n for n in knob["notes"]), knob["notes"]
    from gpudoctor.train import TrainConfig

    if result["kept_start"]:  # the DDP settings were not faster than the start beyond the noise: nothing written
        assert not out.exists()
        confirm = next(k for k in result["knobs"] if k["knob"] == "confirm")
        assert "kept" in confirm["summary"] and len(confirm["trials"]) == 2
    else:
        written = TrainConfig.from_file(out).parallel
        assert written.bucket_cap_mb == knob["params"]["parallel.bucket_cap_mb"]
        assert written.comm_hook == knob["params"]["parallel.comm_hook"]


@pytest.mark.distributed
def test_ranks_agree_on_the_loaders_repeated_pairs(tmp_path: Path) -> None:
    """The loader knob under torchrun: each rank sweeps and measures its pairs on its own, every
    decision (the sweep's pick, the count it is checked against, each pair's winner) is rank 0's;
    a rank deciding on its own would run a different number of pairs and hang the collectives."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gpudoctor",
           "tune", "loader", "--target", f"{TARGET}:loader_target", "--json", "--steps", "2", "--window-s", "0",
           "--out", str(tmp_path / "loader.toml")]  # never the default: a file in the working directory
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    knob = next(k for k in result["knobs"] if k["knob"] == "loader")
    assert knob["params"]["num_workers"] >= 1, knob["notes"]  # reading in the training process is slow
    # the pick checked against the next cheaper count, then each switch: both arms twice, interleaved
    against = [n.split(":")[0] for n in knob["notes"] if " against " in n]
    assert len(against) == 3 and against[1:] == ["prefetch_factor 4 against 2",
                                                 "forkserver workers against the default start method"], knob["notes"]
    ends = ("(repeated)", "prefetch_factor=2", "prefetch_factor=4", "forkserver=off", "forkserver=on")
    paired = [t for t in knob["trials"] if t["setting"].endswith(ends)]
    assert len(paired) == 6, [t["setting"] for t in knob["trials"]]
    # a forkserver worker may fail here (the dataset's class lives in a file loaded by path, which a
    # fresh forkserver process cannot import): a failed arm stops repeating and is never kept
    assert all(len(t["rates"]) == 2 and t["spread"] is not None for t in paired if t["verdict"] == "ok"), paired
    assert sum(t["verdict"] == "ok" for t in paired) >= 5, paired

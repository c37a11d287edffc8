"""Host work by named operation (GD-RUN-HOST-*) and the sampled frames of the periodic-stall
rule, on hand-made step records."""

from __future__ import annotations

import json

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.base import from_dict, to_dict
from gpudoctor.records.finding import Severity
from gpudoctor.records.step import HostFrame, HostOp, StepRecord

GB = 10**9
SITE = "save_checkpoint (train.py:88)"


def by_code(findings):
    return {f.code: f for f in findings}


def _save_steps(build, saves: set[int], save_ms: float = 1900.0, *, n: int = 60, gpu: bool = True,
                gpu_extra: float | None = None):
    """40 ms steps; in ``saves`` a torch.save of 2 GB from SITE adds ``save_ms`` (and the GPU's
    span of the step grows by ``gpu_extra``, default all of it: the GPU idled)."""
    grow = save_ms if gpu_extra is None else gpu_extra
    return build.steps(
        n=n, step_ms=lambda i: 40.0 + (save_ms if i in saves else 0.0),
        gpu_ms=(lambda i: 38.0 + (grow if i in saves else 0.0)) if gpu else None,
        host_ops=lambda i: (HostOp(op="torch.save", ms=save_ms, bytes=2 * GB, site=SITE),) if i in saves else ())


def test_two_checkpoints_in_a_60_step_window_are_named_with_their_share(build):
    # steps 21 and 41 of the default window (steps 55-59 profiled): two stalls give one gap, no
    # "regular" period, and the stall rule said nothing; the measured save time decides now
    run = build.run(steps_by_rank={0: _save_steps(build, {1, 21, 41})},
                    windows={0: build.window(first_step=55, last_step=59, gpu_busy_frac=0.95)})
    found = by_code(diagnose(run))
    f = found["GD-RUN-HOST-SAVE"]
    # steady steps 6-54 (49); 2 x 1,900 ms beyond the median, of 49 x 40 + 3,800 ms
    share = 3800 / (49 * 40 + 3800)
    assert f.expected_gain == pytest.approx(share, abs=1e-4)
    assert f.severity is Severity.WARN
    assert f.title == (f"Host work: every ~20 steps a step spends 1.9 s in torch.save from {SITE}: "
                       f"{100 * share:.1f}% of the run")
    assert "steps 21, 41" in f.evidence[0]
    assert "1.9 GiB each" in f.evidence[1] and SITE in f.evidence[1]
    assert "dcp.async_save" in f.fix and "threading.Thread" in f.fix
    assert "GD-RUN-PERIODIC-STALL" not in found
    assert found[next(iter(found))].code == "GD-RUN-HOST-SAVE"  # the top finding, not headroom


def test_without_named_operations_the_same_two_stalls_stay_unnamed(build):
    # what the rule saw before the probes timed torch.save: too few stalls for a period, no cause
    steps = [StepRecord(**{**to_dict(s), "host_ops": (), "mem": None}) for s in _save_steps(build, {1, 21, 41})]
    run = build.run(steps_by_rank={0: steps}, windows={0: build.window(first_step=55, last_step=59,
                                                                       gpu_busy_frac=0.95)})
    found = by_code(diagnose(run))
    assert "GD-RUN-PERIODIC-STALL" not in found and "GD-RUN-HOST-SAVE" not in found


def test_a_single_checkpoint_is_not_left_out_as_a_one_off(build):
    run = build.run(steps_by_rank={0: _save_steps(build, {41})},
                    windows={0: build.window(first_step=55, last_step=59)})
    facts = run_facts(run, Thresholds())
    assert facts.ranks[0].stats.one_off is None
    f = by_code(diagnose(run))["GD-RUN-HOST-SAVE"]
    assert "at step 41 a step spends 1.9 s in torch.save" in f.title


def test_a_save_the_gpu_hid_costs_only_what_the_gpu_span_grew(build):
    # the host paused 1.9 s, but the GPU had queued work: its span of the step grew by 100 ms
    run = build.run(steps_by_rank={0: _save_steps(build, {21, 41}, gpu_extra=100.0)},
                    windows={0: build.window(first_step=55, last_step=59)})
    f = by_code(diagnose(run))["GD-RUN-HOST-SAVE"]
    assert f.expected_gain == pytest.approx(200 / (49 * 40 + 3800), abs=1e-4)
    assert "queued work hid the rest" in f.evidence[-1]


def test_collections_in_every_step_are_a_steady_cost(build):
    gc_op = (HostOp(op="gc", ms=8.0, calls=12),)
    run = build.run(steps_by_rank={0: build.steps(n=60, gpu_ms=None, host_ops=gc_op)},
                    configs={0: build.config(device="cpu")}, windows={}, gpu=[])
    f = by_code(diagnose(run))["GD-RUN-HOST-GC"]
    assert f.title == "Host work: garbage collection takes 8.0 ms of every step: 20.0% of the run"
    assert f.expected_gain == pytest.approx(0.2)
    assert "gc.freeze()" in f.fix


def test_collections_behind_a_busy_gpu_cost_nothing(build):
    gc_op = (HostOp(op="gc", ms=8.0, calls=12),)
    run = build.run(steps_by_rank={0: build.steps(n=60, host_ops=gc_op)},
                    windows={0: build.window(gpu_busy_ms=200.0)})  # busy the whole step
    assert "GD-RUN-HOST-GC" not in by_code(diagnose(run))


def test_full_collections_every_few_steps_are_named(build):
    def ops(i):
        full = i % 9 == 8
        return (HostOp(op="gc", ms=450.0 if full else 1.0, calls=80, gen2=1 if full else 0),)
    run = build.run(steps_by_rank={0: build.steps(n=60, gpu_ms=None, host_ops=ops,
                                                  step_ms=lambda i: 490.0 if i % 9 == 8 else 40.0)},
                    configs={0: build.config(device="cpu")}, windows={}, gpu=[])
    f = by_code(diagnose(run))["GD-RUN-HOST-GC"]
    assert f.title.startswith("Host work: every ~9 steps a step spends 449 ms in garbage collection")
    assert any("of them full (generation 2" in e for e in f.evidence)


def test_a_checkpoint_at_each_epoch_stays_with_the_epoch_boundary_stall(build):
    loader = build.loader(num_workers=2, persistent_workers=True, dataset_len=1000, batch_size=64)
    saves = {i for i in range(64) if i % 16 == 15}
    steps = build.steps(n=64, step_ms=lambda i: 400.0 if i in saves else 20.0,
                        host_ops=lambda i: (HostOp(op="torch.save", ms=370.0, site=SITE),) if i in saves else ())
    run = build.run(steps_by_rank={0: steps}, configs={0: build.config(loaders=(loader,))},
                    windows={0: build.window(gpu_busy_frac=0.2)})
    found = by_code(diagnose(run))
    assert "GD-RUN-HOST-SAVE" not in found
    f = found["GD-RUN-PERIODIC-STALL"]
    assert "the work of an epoch boundary" in f.title
    assert f"of each, 370 ms in torch.save from {SITE}" in f.evidence[-1]
    assert dict(f.data)["epoch_work_ms"] > 0


def _frames(function: str, lib: str):
    return (HostFrame(function=function, file="/w/engine.py", line=40, samples=60, ms=600.0, lib=lib,
                      callers=("train (train.py:120)",)),)


@pytest.mark.parametrize("lib, words", [
    ("torch.nn.modules.conv.forward", "inference_mode"),
    ("PIL.Image.save", "threading.Thread"),
    ("logging.handlers.emit", "QueueHandler"),
    ("", "less often, or on a thread"),
])
def test_sampled_frames_name_the_host_work_and_its_kind(build, lib, words):
    slow = lambda i: i % 10 == 9  # noqa: E731
    steps = build.steps(n=60, step_ms=lambda i: 140.0 if slow(i) else 40.0,
                        host_frames=lambda i: _frames("evaluate", lib) if slow(i) else ())
    run = build.run(steps_by_rank={0: steps}, windows={0: build.window(gpu_busy_frac=0.5)})
    f = by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"]
    assert f.title.startswith("Periodic stalls: every ~10 steps a step spends 100 ms in evaluate (engine.py:40)")
    assert "evaluate (engine.py:40) < train (train.py:120)" in f.evidence[-1]
    assert words in f.fix


def test_scattered_slow_steps_with_a_recurring_sampled_function_are_named(build):
    slow = {7, 9, 23, 41}
    steps = build.steps(n=60, step_ms=lambda i: 120.0 if i in slow else 40.0,
                        host_frames=lambda i: _frames("dump_images", "PIL.Image.save") if i in slow else ())
    run = build.run(steps_by_rank={0: steps}, windows={0: build.window(gpu_busy_frac=0.5)})
    f = by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"]
    assert "repeatedly a step spends" in f.title and "dump_images" in f.title


def test_host_work_fields_round_trip_and_older_records_read_without_them():
    step = StepRecord(rank=0, step=3, t_end_s=1.0, step_ms=2.0,
                      host_ops=(HostOp(op="torch.save", ms=1900.0, bytes=2 * GB, site=SITE),
                                HostOp(op="gc", ms=3.0, calls=4, gen2=1)),
                      host_frames=_frames("evaluate", "torch.nn.modules.conv.forward"))
    assert from_dict(StepRecord, json.loads(json.dumps(to_dict(step)))) == step
    old = from_dict(StepRecord, {"rank": 0, "step": 3, "t_end_s": 1.0, "step_ms": 2.0})
    assert old.host_ops == () and old.host_frames == ()

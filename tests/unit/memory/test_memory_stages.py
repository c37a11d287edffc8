"""The pure analysis of ``gpudoctor memory run`` on hand-built stage and step records."""

from __future__ import annotations

import io

import memory_run_data as d
from rich.console import Console

from gpudoctor.analysis.memory_stages import analyse_memory_run, stage_parts, stage_rows
from gpudoctor.report.memory_view import render_memory_run

MIB = d.MIB


def test_stage_rows_give_each_stage_its_change() -> None:
    rows = stage_rows(d.stages())
    assert [(r.stage, r.step) for r in rows][:2] == [("model", 0), ("batch", 0)]
    assert [r.delta_bytes // MIB for r in rows] == [100, 10, 400, -300, 200, -100, 400, -300, 2]


def test_parts_split_model_batch_activations_gradients_and_optimizer_state() -> None:
    p = stage_parts(d.stages())
    assert p.model_bytes == 100 * MIB
    assert p.batch_bytes == 10 * MIB  # batch - model at step 0
    assert p.activation_bytes == 400 * MIB  # forward - batch at step 1
    assert p.gradient_bytes == 100 * MIB  # backward - batch at step 1
    assert p.backward_peak_bytes == 650 * MIB
    assert p.optimizer_first_bytes == 200 * MIB  # the first step creates the AdamW state
    assert p.optimizer_later_bytes == 2 * MIB
    assert p.peak_bytes == 850 * MIB


def test_gradients_alive_at_the_batch_are_counted_back_through_zero_grad() -> None:
    # step 1 of the usual loop: batch arrives while step 0's 100 MiB of gradients are alive,
    # zero_grad(set_to_none=True) frees them, then forward and backward
    rows = d.stages()[:5] + [
        d.StageMemory(stage="batch", step=1, allocated_bytes=410 * MIB, reserved_bytes=700 * MIB,
                      peak_allocated_bytes=420 * MIB),
        d.StageMemory(stage="zero_grad", step=1, allocated_bytes=310 * MIB, reserved_bytes=700 * MIB,
                      peak_allocated_bytes=410 * MIB, freed_bytes=100 * MIB),
        d.StageMemory(stage="forward", step=1, allocated_bytes=710 * MIB, reserved_bytes=800 * MIB,
                      peak_allocated_bytes=730 * MIB),
        d.StageMemory(stage="backward", step=1, allocated_bytes=410 * MIB, reserved_bytes=800 * MIB,
                      peak_allocated_bytes=850 * MIB),
    ]
    p = stage_parts(rows)
    assert p.activation_bytes == 400 * MIB and p.gradient_bytes == 100 * MIB


def test_batch_fit_extrapolates_from_activations_per_sample() -> None:
    report = analyse_memory_run(d.run_data())
    fit = report.fit
    assert fit.batch_size == 8
    assert fit.activation_bytes_per_sample == 50 * MIB  # 400 MiB / 8 samples
    assert fit.fixed_bytes == 450 * MIB  # 850 MiB peak - 8 x 50 MiB
    assert fit.headroom_bytes == 150 * MIB
    assert fit.max_batch_size == 9  # (0.9 x 1000 - 450) / 50
    assert report.on_gpu and report.notes == ()


def test_steady_run_has_no_leak_and_no_expandable_segments_advice() -> None:
    report = analyse_memory_run(d.run_data())
    assert len(report.curve) == 20 and report.curve[-1].allocated_bytes == 410 * MIB
    assert "GD-RUN-MEM-LEAK" not in {f.code for f in report.findings}
    frag = report.fragmentation
    assert frag.cached_free_bytes == 390 * MIB and frag.inactive_split_bytes == 5 * MIB
    assert frag.advice == ""


def test_growing_allocation_is_a_leak_from_memory_rules() -> None:
    report = analyse_memory_run(d.run_data(steps={0: d.steps(30, grow_mib=4)}))
    leak = [f for f in report.findings if f.code == "GD-RUN-MEM-LEAK"]
    assert len(leak) == 1 and "4.0 MiB every step" in leak[0].title


def test_retries_advise_expandable_segments_unless_already_on() -> None:
    report = analyse_memory_run(d.run_data(steps={0: d.steps(retries=3)}))
    assert report.fragmentation.advice == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert "GD-RUN-FRAGMENTATION" in {f.code for f in report.findings}
    on = d.run_data(steps={0: d.steps(retries=3)},
                    configs={0: d.config(alloc_conf="expandable_segments:True")})
    assert analyse_memory_run(on).fragmentation.advice == ""


def test_oom_is_explained_with_its_sites() -> None:
    report = analyse_memory_run(d.run_data(oom=d.oom()))
    assert report.findings[-1].code == "GD-OOM-SHORTAGE"
    top = report.oom_sites[0]
    assert top.site == "train.py:12 forward" and top.bytes == 500 * MIB and top.blocks == 2
    assert report.oom_pickle == "rd/oom-snapshot.pickle"


def test_cpu_run_says_stages_need_a_gpu() -> None:
    report = analyse_memory_run(d.run_data(memory={}, configs={}, steps={0: d.steps()[:0]}))
    assert not report.on_gpu and report.parts is None and report.fit is None
    assert "memory stages need a CUDA GPU" in report.notes[0]


def _render(report) -> str:
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(render_memory_run(report, "rd"))
    return buf.getvalue()


def test_rendered_memory_run_golden(golden) -> None:
    golden("memory/memory_run.txt", _render(analyse_memory_run(d.run_data())))


def test_rendered_oom_golden(golden) -> None:
    golden("memory/memory_run_oom.txt", _render(analyse_memory_run(d.run_data(oom=d.oom()))))


def test_a_probed_step_keeps_its_real_peak_on_the_curve() -> None:
    """The stage probes reset the peak at every stage, so a probed step's own record only holds the
    peak since its optimizer stage; the curve takes the larger of that and its stages' peaks."""
    import dataclasses

    steps = d.steps()
    steps[0] = dataclasses.replace(steps[0], mem=dataclasses.replace(steps[0].mem, peak_allocated_bytes=420 * MIB))
    report = analyse_memory_run(d.run_data(steps={0: steps}))
    assert report.curve[0].peak_allocated_bytes == 650 * MIB  # the backward stage of step 0
    assert report.curve[2].peak_allocated_bytes == 850 * MIB  # not probed: its own record

"""Per-module forward memory (nested peaks from one counter), the stage order's arithmetic, and
the leak's allocation sites: on hand-built counters and records."""

from __future__ import annotations

import dataclasses
import io

import memory_run_data as d
import pytest
from rich.console import Console

from gpudoctor.analysis.memory_leak_sites import grown_sites, site_totals, user_site
from gpudoctor.analysis.memory_modules import module_table
from gpudoctor.analysis.memory_stages import analyse_memory_run, stage_parts
from gpudoctor.collectors.instrument.module_memory import ModuleHooks, ModulePeaks
from gpudoctor.records.memory import LeakSites, LiveBlock, ModuleMemory, StageMemory
from gpudoctor.report.memory_view import render_memory_run

MIB = d.MIB


class FakeAllocator:
    """The CUDA allocator's three counters, driven by hand."""

    def __init__(self) -> None:
        self.now = 0
        self.top = 0

    def alloc(self, n: int) -> None:
        self.now += n
        self.top = max(self.top, self.now)

    def free(self, n: int) -> None:
        self.now -= n

    def reset(self) -> None:
        self.top = self.now

    def peaks(self) -> ModulePeaks:
        return ModulePeaks(allocated=lambda: self.now, peak=lambda: self.top, reset=self.reset)


def test_nested_peaks_are_each_modules_own_and_the_parent_includes_its_children() -> None:
    a = FakeAllocator()
    a.alloc(100)  # weights
    p = a.peaks()
    p.enter(1, "", "Net")
    p.enter(2, "block", "Block")
    p.enter(3, "block.conv", "Conv2d")
    a.alloc(50)  # workspace, freed inside
    a.free(50)
    a.alloc(10)  # output kept
    p.leave(3)
    p.enter(4, "block.relu", "ReLU")
    a.alloc(10)
    p.leave(4)
    p.leave(2)
    p.enter(5, "head", "Linear")
    a.alloc(30)
    a.free(30)
    a.alloc(1)
    p.leave(5)
    p.leave(1)
    rows = {m.name: m for m in p.records(step=1)}
    assert (rows["block.conv"].kept_bytes, rows["block.conv"].peak_bytes) == (10, 50)
    assert (rows["block.relu"].kept_bytes, rows["block.relu"].peak_bytes) == (10, 10)
    assert (rows["block"].kept_bytes, rows["block"].peak_bytes) == (20, 50)
    assert (rows["head"].kept_bytes, rows["head"].peak_bytes) == (1, 30)
    assert (rows[""].kept_bytes, rows[""].peak_bytes) == (21, 50)  # the peak inside block: 100+50
    assert p.take_carry() == 150 and p.take_carry() == 0  # the stage probe still sees the step's peak
    assert sorted(m.depth for m in p.records(1)) == [0, 1, 1, 2, 2]


def test_a_module_called_twice_sums_kept_and_keeps_the_larger_peak() -> None:
    a = FakeAllocator()
    p = a.peaks()
    for transient in (5, 40):
        p.enter(7, "act", "GELU")
        a.alloc(transient)
        a.free(transient)
        a.alloc(3)
        p.leave(7)
    (row,) = p.records(0)
    assert (row.calls, row.kept_bytes, row.peak_bytes) == (2, 6, 40)


def test_a_forward_that_raised_is_dropped_at_the_next_post_hook() -> None:
    a = FakeAllocator()
    p = a.peaks()
    p.enter(1, "", "Net")
    p.enter(2, "bad", "Bad")  # raised: its post-hook never comes
    a.alloc(4)
    p.leave(1)
    assert [r.name for r in p.records(0)] == [""]


def test_hooks_find_the_trained_model_and_name_its_modules() -> None:
    torch = pytest.importorskip("torch")
    a = FakeAllocator()

    class Keep(torch.nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n = n
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            a.alloc(self.n)
            return x

    model = torch.nn.Sequential(Keep(8), torch.nn.Sequential(Keep(16), torch.nn.ReLU()))
    ends: list[int] = []
    starts: list[tuple[int, int]] = []
    hooks = ModuleHooks(on_forward_start=lambda: starts.append((a.now, len(hooks.peaks.stack))),
                        on_forward_end=lambda: ends.append(a.now), active=lambda: True,
                        measure_now=lambda: True, peaks=a.peaks())
    hooks.install()
    try:
        torch.nn.CrossEntropyLoss()(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))  # no parameters
        model(torch.zeros(2))
        with torch.no_grad():
            model(torch.zeros(2))  # evaluation: not a training forward
    finally:
        hooks.remove()
    assert ends == [24]
    assert starts == [(0, 0)]  # once, when the trained model's forward began, before any module was entered
    rows = {m.name: m for m in hooks.peaks.records(0)}
    assert set(rows) == {"", "0", "1", "1.0", "1.1"}
    assert rows["1"].kept_bytes == 16 and rows["1"].depth == 1 and rows["1.0"].depth == 2
    assert rows[""].type == "Sequential" and rows[""].kept_bytes == 24


def _lines() -> list[ModuleMemory]:
    spec = [("", "ResNet", 0, 900), ("layer1", "Sequential", 1, 400), ("layer1.0", "Bottleneck", 2, 200),
            ("layer1.0.conv1", "Conv2d", 3, 50), ("fc", "Linear", 1, 1)]
    return [ModuleMemory(step=1, name=n, type=t, depth=dep, calls=1, kept_bytes=k * MIB,
                         peak_bytes=2 * k * MIB, order=i) for i, (n, t, dep, k) in enumerate(spec)]


def test_module_table_ranks_by_kept_bytes_with_the_model_as_total() -> None:
    table = module_table(_lines(), top=2)
    assert table.model.name == "(model)" and table.model.share == 1.0
    assert [r.name for r in table.rows] == ["layer1", "layer1.0"]
    assert table.rows[0].share == pytest.approx(400 / 900)
    leaves = module_table(_lines(), leaves_only=True)
    assert [r.name for r in leaves.rows] == ["layer1.0.conv1", "fc"]
    assert module_table([]) is None


@pytest.mark.parametrize("width", [80, 120])
def test_memory_run_with_modules_renders(width: int, golden) -> None:
    run = d.run_data()
    run.modules = {0: _lines()}
    report = analyse_memory_run(run)
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(render_memory_run(report, "rd"))
    golden(f"memory_run_modules_{width}.txt", buf.getvalue())


def test_modules_asked_for_on_a_cpu_get_a_note() -> None:
    run = d.run_data()
    run.memory = {}
    report = analyse_memory_run(run, modules_requested=True)
    assert report.modules is None and any("needs a CUDA GPU" in n for n in report.notes)


# ---- stage order: the arithmetic ---------------------------------------------------------------

def _stage(stage: str, step: int, alloc: int, freed: int = 0) -> StageMemory:
    return StageMemory(stage=stage, step=step, allocated_bytes=alloc * MIB, reserved_bytes=2000 * MIB,
                       peak_allocated_bytes=alloc * MIB, freed_bytes=freed * MIB)


def test_imagenet_order_puts_the_activations_under_forward() -> None:
    # batch, forward, zero_grad (frees step 0's 100 MiB of gradients), loss, backward
    rows = [_stage("model", 0, 100), _stage("batch", 1, 310), _stage("forward", 1, 710),
            _stage("zero_grad", 1, 610, freed=100), _stage("loss", 1, 612), _stage("backward", 1, 410)]
    p = stage_parts(rows)
    assert p.activation_bytes == 400 * MIB  # forward - batch, not under zero_grad
    assert p.loss_bytes == 2 * MIB
    assert p.gradient_bytes == 200 * MIB  # backward - batch + the 100 MiB zero_grad freed


def test_usual_order_counts_gradients_freed_before_the_forward() -> None:
    rows = [_stage("model", 0, 100), _stage("batch", 1, 410), _stage("zero_grad", 1, 310, freed=100),
            _stage("forward", 1, 710), _stage("loss", 1, 720), _stage("backward", 1, 410)]
    p = stage_parts(rows)
    assert p.activation_bytes == 400 * MIB and p.loss_bytes == 10 * MIB and p.gradient_bytes == 100 * MIB


# ---- leak sites ---------------------------------------------------------------------------------

def test_user_site_skips_torch_and_gpudoctor_frames() -> None:
    frames = ("/usr/lib/python3/site-packages/torch/nn/modules/linear.py:125 forward",
              "/x/src/gpudoctor/collectors/instrument/patches.py:10 w", "train.py:42 train_step")
    assert user_site(frames) == "train.py:42 train_step"
    assert user_site(frames[:1]) == frames[0]


def test_grown_sites_name_the_site_whose_live_bytes_grew() -> None:
    before = site_totals([LiveBlock(size_bytes=100 * MIB, frames=("train.py:10 build",)),
                          LiveBlock(size_bytes=4 * MIB, frames=("train.py:30 step",))])
    after = site_totals([LiveBlock(size_bytes=100 * MIB, frames=("train.py:10 build",))]
                        + [LiveBlock(size_bytes=4 * MIB, frames=("train.py:30 step",))] * 6
                        + [LiveBlock(size_bytes=1 * MIB, frames=("train.py:31 step",))])
    grown = grown_sites(before, after)
    assert [g.site for g in grown] == ["train.py:30 step", "train.py:31 step"]
    assert (grown[0].bytes_from, grown[0].bytes_to, grown[0].blocks_to) == (4 * MIB, 24 * MIB, 6)


def test_the_leak_finding_names_the_grown_sites() -> None:
    run = d.run_data(steps={0: d.steps(30, grow_mib=4)})
    sites = grown_sites({"train.py:30 step": (4 * MIB, 1)}, {"train.py:30 step": (24 * MIB, 6)})
    run.leak_sites = {0: LeakSites(step_from=3, step_to=8, sites=sites)}
    report = analyse_memory_run(run)
    (leak,) = [f for f in report.findings if f.code == "GD-RUN-MEM-LEAK"]
    assert leak.title.endswith("the most grows at train.py:30 step")
    assert any("train.py:30 step: live 4.0 MiB at step 3 -> 24.0 MiB at step 8 (+20.0 MiB, 4.0 MiB per step"
               in e for e in leak.evidence)
    assert leak.fix.startswith("# the tensors kept each step are allocated at train.py:30 step")
    assert "memory run" not in leak.fix and "loss.detach()" in leak.fix  # found: no need to look again
    steady = d.run_data()
    steady.leak_sites = run.leak_sites
    assert "GD-RUN-MEM-LEAK" not in {f.code for f in analyse_memory_run(steady).findings}
    assert dataclasses.replace(report, findings=()).leak_sites is not None

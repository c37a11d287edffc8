"""The script's own switches (fix/switches.py): a fix the script implements behind an off-by-default
flag is planned as a command-line change (the flag added), found by what the guarded code does."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.cli.fix_flow import _measure_all, argv_for
from gpudoctor.fix.switches import add_switches, given_switches, switch_lines
from gpudoctor.fix.ops import OptionEdit
from tests.support.fix_scripts import AMP_STEP
from tests.support.fix_planning import CPU, GPU, advice, planned, runs

# timm-style: the step is in a helper called from two branches (no loop located), the fixes behind flags
TIMM_LIKE = """
import argparse
from contextlib import suppress
from functools import partial
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument('--amp', action='store_true', default=False, help='mixed precision')
parser.add_argument('--amp-dtype', default='float16', type=str)
parser.add_argument('--channels-last', action='store_true', default=False)
parser.add_argument('--torchcompile', nargs='?', type=str, default=None, const='inductor')
parser.add_argument('-j', '--workers', type=int, default=4)
parser.add_argument('--pin-mem', action='store_true', default=False)
parser.add_argument('--steps', type=int, default=3)


def make_loader(num_workers, pin_memory):
    data = torch.utils.data.TensorDataset(torch.randn(32, 3, 8, 8), torch.randint(0, 4, (32,)))
    return torch.utils.data.DataLoader(data, batch_size=8, num_workers=num_workers, pin_memory=pin_memory)


""" + AMP_STEP + """

def main():
    args = parser.parse_args()
    amp_dtype = torch.float16
    if args.amp:
        if args.amp_dtype == 'bfloat16':
            amp_dtype = torch.bfloat16
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(4))
    model(torch.randn(1, 3, 8, 8))
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        print('channels_last on')
    if args.torchcompile:
        model = torch.compile(model, backend=args.torchcompile)
    amp_autocast = suppress
    if args.amp:
        amp_autocast = partial(torch.autocast, device_type='cpu', dtype=amp_dtype)
        print('amp', amp_dtype)
    loader = make_loader(num_workers=args.workers, pin_memory=args.pin_mem)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        if i % 2:
            one_step(model, x, y, opt, amp_autocast)
        else:
            one_step(model, x, y, opt, amp_autocast)
        if i + 1 >= args.steps:
            break
    print('done')


if __name__ == '__main__':
    main()
"""


def _switch(plan, kind):
    return next(c for c in plan.changes if c.kind == kind)


def _words(change):
    return [w for e in change.switches for w in (e.flags[0], e.value) if w]


def test_timm_like_flags_become_command_line_changes():
    _, plan, fixed = planned(TIMM_LIKE, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND", "GD-RUN-DATALOADER")
    assert fixed == __import__("textwrap").dedent(TIMM_LIKE)  # nothing patched in the source
    bf16 = _switch(plan, "bf16")
    assert _words(bf16) == ["--amp", "--amp-dtype", "bfloat16"] and bf16.ops == () and bf16.precision
    assert _words(_switch(plan, "channels_last")) == ["--channels-last"]
    assert _words(_switch(plan, "compile")) == ["--torchcompile"]
    loader = _switch(plan, "loader")
    assert [(e.flags, e.value, e.was) for e in loader.switches] == [(("-j", "--workers"), "8", "4"),
                                                                      (("--pin-mem",), "", "")]
    # what the loop needs but the script has no flag for is still advice (the loop is not located)
    assert "training loop was not found" in advice(plan, "tf32")


def test_patched_command_line_adds_and_replaces():
    _, plan, _ = planned(TIMM_LIKE, "GD-RUN-FP32-COMPUTE", "GD-RUN-DATALOADER")
    argv, _ = argv_for(("python", "train.py", "--amp-dtype", "float16", "-j4"), plan.changes)
    assert argv == ("--amp-dtype", "bfloat16", "-j8", "--channels-last", "--amp", "--pin-mem")
    # words after a bare -- are the script's positionals: flags go before it
    edits = (OptionEdit(flags=("--amp",), value=""),)
    assert add_switches(("a", "--", "--x"), edits) == ("a", "--amp", "--", "--x")
    assert add_switches(("--amp",), edits) == ("--amp",)  # already on: nothing added


def test_switch_runs_on_cpu(tmp_path: Path):
    """The command-line change's run: the unchanged script with the flags given trains on the CPU,
    and the flags did turn the fixes on (the script says so)."""
    _, plan, fixed = planned(TIMM_LIKE, "GD-RUN-CHANNELS-LAST", config=CPU)
    argv, _ = argv_for(("python", "train.py", "--steps", "2"), plan.changes)
    assert argv == ("--steps", "2", "--channels-last")
    runs(fixed, tmp_path, *argv)
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(tmp_path / "patched.py"), *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert "channels_last on" in out.stdout


def test_flag_that_only_mentions_is_no_switch():
    """--amp that only prints, and a --channels-last that only goes into a log line: not switches;
    the located loop is patched as before. A flag named otherwise that guards the layout is one."""
    source = """
    import argparse
    import torch
    import torch.nn as nn
    p = argparse.ArgumentParser()
    p.add_argument('--amp', action='store_true')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--fast', action='store_true')
    args = p.parse_args()
    if args.amp:
        print('amp requested')
    print(f'layout {args.channels_last}')
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 2))
    if args.fast:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.zeros(8).long()))
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    """
    _, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE")
    bf16 = _switch(plan, "bf16")
    assert bf16.switches == () and bf16.ops  # autocast patched in the code: --amp guards no autocast
    assert "torch.autocast" in fixed
    assert _words(_switch(plan, "channels_last")) == ["--fast"]  # by what it guards, not by its name


def test_enabled_keyword_and_precision_choice():
    """``autocast(enabled=args.amp)`` on a located loop: the flag (was text advice); a precision
    option with bf16 among its choices gets that spelling."""
    source = """
    import argparse
    import torch
    import torch.nn as nn
    p = argparse.ArgumentParser()
    p.add_argument('--amp', action='store_true')
    p.add_argument('--amp-dtype', default='fp16', choices=['fp16', 'bf16'])
    args = p.parse_args()
    dtype = torch.bfloat16 if args.amp_dtype == 'bf16' else torch.float16
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8).long()))
    for x, y in loader:
        with torch.autocast('cuda', dtype=dtype, enabled=args.amp):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    """
    _, plan, _ = planned(source, "GD-RUN-FP32-COMPUTE")
    assert _words(_switch(plan, "bf16")) == ["--amp", "--amp-dtype", "bf16"]


def test_no_measure_keeps_the_switch_and_says_what_to_run(tmp_path: Path):
    _, plan, _ = planned(TIMM_LIKE, "GD-RUN-CHANNELS-LAST")
    source = __import__("textwrap").dedent(TIMM_LIKE)
    command = ("python", "train.py", "-j", "2")
    outcomes, final, cmp_, run = _measure_all({"": source}, Path("train.py"), plan.changes, (), command, tmp_path,
                                              None, None, 3, 2, False, False)
    assert [o.change.kind for o in outcomes] == ["channels_last"] and final[""] == source
    lines = switch_lines([o.change for o in outcomes], "python train.py -j 2 --channels-last", measured=False)
    assert lines == ["command line: the script implements channels_last behind its own --channels-last; run with it, "
                     "not measured (--no-measure):", "    python train.py -j 2 --channels-last"]


def test_gpu_plan_on_cpu_config_is_the_same_flags():
    _, gpu, _ = planned(TIMM_LIKE, "GD-RUN-LAUNCH-BOUND", config=GPU)
    _, cpu, _ = planned(TIMM_LIKE, "GD-RUN-LAUNCH-BOUND", config=CPU)
    assert _words(_switch(gpu, "compile")) == _words(_switch(cpu, "compile")) == ["--torchcompile"]


def test_a_switch_already_on_is_advice():
    _, plan, _ = planned(TIMM_LIKE, "GD-RUN-FP32-COMPUTE")
    changes, adv = given_switches(plan.changes, plan.advice, ("--amp", "--amp-dtype=bfloat16"))
    assert "bf16" not in [c.kind for c in changes] and "channels_last" in [c.kind for c in changes]
    assert any(a.reason.startswith("bf16: your command line gives the script's own --amp --amp-dtype bfloat16")
               for a in adv)
    changes, _ = given_switches(plan.changes, plan.advice, ("--amp", "--amp-dtype", "float16"))
    assert "bf16" in [c.kind for c in changes]  # float16 given: the change is to bfloat16


def test_one_flag_is_one_change():
    """timm's --pin-mem answers the loader finding and the pageable-copy finding: planned once."""
    _, plan, _ = planned(TIMM_LIKE, "GD-RUN-DATALOADER", "GD-RUN-H2D-PAGEABLE")
    assert [c.kind for c in plan.changes] == ["loader"]


ENGINE = """
import torch


def train_one_epoch(model, loader, opt, use_amp=False):
    for x, y in loader:
        if use_amp:
            with torch.cuda.amp.autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
"""

CONVNEXT_LIKE = """
import argparse
import torch
from engine import train_one_epoch


def str2bool(v):
    return v.lower() in ("yes", "true", "1")


parser = argparse.ArgumentParser()
parser.add_argument('--use_amp', type=str2bool, default=False)
parser.add_argument('--pin-mem', action='store_true')
parser.set_defaults(pin_mem=True)
args = parser.parse_args()
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8).long()),
                                     pin_memory=args.pin_mem)
for epoch in range(2):
    train_one_epoch(model, loader, opt, use_amp=args.use_amp)
"""


def test_a_flag_passed_to_a_project_module_and_set_defaults(tmp_path: Path):
    """ConvNeXt: ``--use_amp`` (``type=str2bool``) is passed as ``use_amp=`` to engine.py's
    ``train_one_epoch``, which autocasts under it: the switch is ``--use_amp true``, found through
    the callee although the loop is located in engine.py. DeiT's ``--pin-mem`` is
    ``store_true`` with ``set_defaults(pin_mem=True)``: on already, no switch."""
    (tmp_path / "engine.py").write_text(ENGINE, encoding="utf-8")
    script = tmp_path / "main.py"
    script.write_text(CONVNEXT_LIKE, encoding="utf-8")
    found, plan, _ = planned(CONVNEXT_LIKE, "GD-RUN-FP32-COMPUTE", "GD-RUN-H2D-PAGEABLE", path=script)
    assert found.file.endswith("engine.py")
    assert _words(_switch(plan, "bf16")) == ["--use_amp", "true"]
    assert all(not c.switches for c in plan.changes if c.kind != "bf16")  # --pin-mem is on by default


@pytest.mark.parametrize("width", [80, 120])
def test_the_command_to_run_reads_at_both_widths(width: int, golden) -> None:
    """The prose wraps at the terminal's width; the command itself is never wrapped (copied whole)."""
    import io

    from rich.console import Console

    from gpudoctor.fix.view import print_lines

    _, plan, _ = planned(TIMM_LIKE, "GD-RUN-FP32-COMPUTE", config=GPU)
    changes = [c for c in plan.changes if c.switches]
    assert changes, plan
    command = add_switches(("python", "train.py", "data/", "--model", "resnet50", "-b", "128"),
                           [e for c in changes for e in c.switches])
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_lines(console, switch_lines(changes, " ".join(command), measured=True))
    text = console.file.getvalue()
    assert f"\n    {' '.join(command)}\n" in text
    golden(f"fix/switch_command-{width}.txt", text)

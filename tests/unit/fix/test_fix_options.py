"""``gpudoctor fix`` keeps the script's command-line flags working (issue 24): a loader keyword read
from an argparse option gets the option's default changed, not a literal in the call; a command line
that sets the option is measured, and shown, with the new value; a value not traced to an option is
replaced and the comment says what it was."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.fix.edit import apply_located
from gpudoctor.fix.locate import locate
from gpudoctor.fix.ops import OptionEdit
from gpudoctor.fix.options import command_line, dest_of, rewrite_argv, shown
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.view import command_lines, print_lines, unified_diff
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import LoaderConfig, RankConfig

SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "fix" / "argparse_loader.py"
LOADER = LoaderConfig(num_workers=4, pin_memory=False, persistent_workers=False, prefetch_factor=2,
                      batch_size=256, drop_last=False, sampler="RandomSampler", dataset="Slow", batches=512)
CONFIG = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16, loaders=(LOADER,))
ARGV = ("-a", "resnet18", "--dummy", "-b", "256", "-j", "4")  # the command line
# the option of the fixture, as the planner records it
WORKERS = OptionEdit(flags=("-j", "--workers"), value="8", was="0",
                     longs=("--batch-size", "--multiprocessing-distributed", "--steps", "--wd", "--weight-decay",
                            "--workers", "--world-size"))


def loader_change(source: str):
    finding = Finding(code="GD-RUN-DATALOADER", severity=Severity.WARN, title="loader", evidence=(), fix="workers")
    plan = plan_fix(locate(source), [finding], CONFIG)
    return next(c for c in plan.changes if c.kind == "loader")


def test_a_workers_flag_gets_its_default_changed_and_the_call_keeps_reading_it(golden) -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    change = loader_change(source)
    assert change.options == (WORKERS,)  # followed main() -> main_worker(0, 1, args) and mp.spawn(..., args=(n, args))
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped
    ast.parse(fixed)
    assert 'parser.add_argument("-j", "--workers", default=8, type=int, metavar="N",' in fixed
    assert 'help="data loading workers (default: 8)")' in fixed  # -h says what it does now
    assert "num_workers=args.workers," in fixed and "num_workers=8" not in fixed
    # -j 0 must still run: DataLoader refuses both without workers
    assert "persistent_workers=args.workers > 0," in fixed and "prefetch_factor=4 if args.workers > 0 else None)" in fixed
    assert ("# gpudoctor fix: GD-RUN-DATALOADER — 8 worker processes load the batches: the default of -j/--workers "
            "(was 0) (a total per node: line 45 divides it by ngpus_per_node; one process measured: with N processes set "
            "N x 8), read as num_workers=args.workers at line 50; also read at line 45; -j N still sets it\n") in fixed
    golden("fix/argparse_default.diff", unified_diff(source, fixed, "argparse_loader.py"))


def render(width: int, argv: tuple[str, ...], measured: bool = True) -> str:
    source = SCRIPT.read_text(encoding="utf-8")
    change = loader_change(source)
    fixed, _, _ = apply_located(source, [change])
    new, said = command_line(argv, change.options)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(unified_diff(source, fixed, "argparse_loader.py"), highlight=False, markup=False, end="",
                  soft_wrap=True)
    print_lines(console, command_lines(said, shown(new, "argparse_loader.py"), measured))
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_a_command_line_that_sets_the_flag_is_told_the_new_value(width: int, golden) -> None:
    text = render(width, ARGV)
    assert "your command line sets -j 4, which overrides the new default; run with -j 8" in " ".join(text.split())
    assert "\n    python argparse_loader.py -a resnet18 --dummy -b 256 -j 8\n" in text  # never wrapped
    golden(f"fix/command_line-{width}.txt", text)


def test_a_command_line_without_the_flag_takes_the_new_default() -> None:
    text = " ".join(render(120, ("-b", "256")).split())
    assert "command line: -j/--workers is not on your command line: its new default applies (8, was 0)" in text
    assert "python argparse_loader.py" not in text  # nothing to change in the command
    assert render(120, ARGV, measured=False).count("as the patched copy was measured") == 0


@pytest.mark.parametrize(("argv", "new", "said"), [
    (("-j", "4"), ("-j", "8"), ("-j 4", "-j 8")),
    (("-j4", "-b", "2"), ("-j8", "-b", "2"), ("-j4", "-j8")),
    (("-j=4",), ("-j=8",), ("-j=4", "-j=8")),
    (("--workers", "4"), ("--workers", "8"), ("--workers 4", "--workers 8")),
    (("--workers=4",), ("--workers=8",), ("--workers=4", "--workers=8")),
    (("--work", "4"), ("--work", "8"), ("--work 4", "--work 8")),  # argparse's unique prefix
    (("-j", "2", "-b", "4", "--workers", "4"), ("-j", "8", "-b", "4", "--workers", "8"), ("--workers 4", "--workers 8")),
    (("--wor", "4"), ("--wor", "4"), None),  # --workers or --world-size: argparse refuses it, left alone
    (("-b", "4", "--", "-j", "4"), ("-b", "4", "--", "-j", "4"), None),  # after --: positional
    (("-b", "4"), ("-b", "4"), None),
    (("-j",), ("-j",), None),  # no value: argparse's error, left to it
])
def test_every_way_argparse_takes_an_option_value_is_rewritten(argv, new, said) -> None:
    assert rewrite_argv(argv, WORKERS) == (new, said)


def test_a_one_dash_long_option_is_rewritten_and_not_confused_with_a_short_one() -> None:
    threads = OptionEdit(flags=("-nw",), value="8", was="2")
    assert rewrite_argv(("-nw", "2", "-n", "3"), threads) == (("-nw", "8", "-n", "3"), ("-nw 2", "-nw 8"))
    assert rewrite_argv(("-n", "3"), threads) == (("-n", "3"), None)


def test_dest_is_resolved_as_argparse_does() -> None:
    assert dest_of(("-j", "--workers")) == "workers"
    assert dest_of(("-b", "--batch-size")) == "batch_size"
    assert dest_of(("-j",)) == "j"
    assert dest_of(("--wd", "--weight-decay"), "weight_decay") == "weight_decay"
    assert dest_of(("--lr", "--learning-rate")) == "lr"  # the first long option, not the longest


UNTRACED = [
    # the namespace is a parameter one of whose callers passes something else
    ("    main_worker(0, 1, args)\n", "    main_worker(0, 1, argparse.Namespace(workers=2, batch_size=4, steps=8, "
     "weight_decay=0.0, multiprocessing_distributed=False))\n", "num_workers was args.workers"),
    # parsed from a list written in the file, not from the command line
    ("    args = parser.parse_args()\n", '    args = parser.parse_args(["-j", "2"])\n', "num_workers was args.workers"),
    # a config dict
    ("num_workers=args.workers)", 'num_workers={"workers": 2}["workers"])', 'num_workers was {"workers": 2}["workers"]'),
]


@pytest.mark.parametrize(("old", "new", "note"), UNTRACED, ids=["other-caller", "parse-list", "dict"])
def test_a_value_not_traced_to_an_option_is_replaced_and_the_comment_says_what_it_was(old, new, note) -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    assert old in source
    change = loader_change(source.replace(old, new))
    assert change.options == ()
    (op,) = change.ops
    assert dict(op.kwargs)["num_workers"] == "8"
    assert op.why.endswith(f"({note}: that setting no longer applies to this loader)")


def test_two_options_with_one_dest_are_not_guessed() -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace(
        'parser.add_argument("--steps"', 'parser.add_argument("--num-workers", dest="workers", type=int)\n'
                                         'parser.add_argument("--steps"')
    assert loader_change(source).options == ()


def test_all_options_of_a_patch_are_rewritten_in_one_command_line() -> None:
    prefetch = OptionEdit(flags=("--prefetch",), value="4", was="2", longs=("--prefetch",))
    argv, said = command_line(("-j", "4", "--prefetch=2", "x"), [WORKERS, prefetch])
    assert argv == ("-j", "8", "--prefetch=4", "x")
    assert said == [(WORKERS, ("-j 4", "-j 8")), (prefetch, ("--prefetch=2", "--prefetch=4"))]


def test_a_namespace_handed_to_spawn_positionally_is_followed_too() -> None:
    # torch.multiprocessing.spawn(main_worker, (args,), nprocs): the args tuple as the second positional
    # argument, as facebookresearch/barlowtwins hands it (fix's second held-out round: a literal was written)
    source = SCRIPT.read_text(encoding="utf-8")
    spawned = "mp.spawn(main_worker, nprocs=args.world_size, args=(args.world_size, args))"
    positional = "mp.spawn(main_worker, (args.world_size, args), args.world_size)"
    assert spawned in source
    change = loader_change(source.replace(spawned, positional))
    assert change.options == (WORKERS,)
    fixed, _, dropped = apply_located(source.replace(spawned, positional), [change])
    assert not dropped and "num_workers=args.workers," in fixed and "num_workers=8" not in fixed


def test_a_default_that_already_is_the_planned_value_is_left_alone_but_the_command_line_still_changes() -> None:
    # barlowtwins' --workers defaults to 8, the planned count: no edit (or comment) on its add_argument line;
    # a command line that sets --workers 4 is still measured, and shown, with 8
    source = SCRIPT.read_text(encoding="utf-8").replace('"--workers", default=0,', '"--workers", default=8,')
    assert 'default=8,' in source
    change = loader_change(source)
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped and "the default of -j/--workers" not in fixed
    assert 'parser.add_argument("-j", "--workers", default=8, type=int, metavar="N",' in fixed
    argv, said = command_line(("-j", "4"), change.options)
    assert argv == ("-j", "8") and said

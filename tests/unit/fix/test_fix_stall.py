"""``gpudoctor fix`` on GD-RUN-PERIODIC-STALL: a stall at every epoch boundary whose first batch
waits for the DataLoader's restarted workers gets ``persistent_workers=True`` (the ``persistent``
change), planned from the finding's data (``Finding.data``, :mod:`gpudoctor.analysis.tail_rules`)
and the recorded findings of pytorch/examples' dcgan on an H200 (``tests/fixtures/runs_corpus/
dcgan``), on a dcgan-shaped script written here; the script's own per-epoch work is text advice."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.fix.edit import apply_located
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.view import unified_diff
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.rundir import load_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "fix" / "epoch_stall.py"
DCGAN = ROOT / "fixtures" / "runs_corpus" / "dcgan"
STALL = "GD-RUN-PERIODIC-STALL"


@pytest.fixture(scope="module")
def recorded():
    run = load_run(DCGAN)
    return list(diagnose(run)), run.configs[min(run.configs)]


def _stall(findings: list[Finding]) -> Finding:
    return next(f for f in findings if f.code == STALL)


def _with_data(finding: Finding, **changes: float) -> Finding:
    return dataclasses.replace(finding, data=tuple({**dict(finding.data), **changes}.items()))


def test_the_dcgan_shape_gets_persistent_workers_and_the_epoch_work_as_advice(recorded, golden) -> None:
    findings, config = recorded
    assert findings[0].code == STALL  # the recording's top finding
    source = SCRIPT.read_text(encoding="utf-8")
    plan = plan_fix(locate(source), findings, config)
    assert [c.kind for c in plan.changes] == ["persistent", "compile", "loader"]
    (change,) = [c for c in plan.changes if c.kind == "persistent"]
    assert change.code == STALL and not change.precision
    # --workers 0 must still run: DataLoader refuses persistent workers without workers
    assert [dict(o.kwargs) for o in change.ops] == [{"persistent_workers": "int(opt.workers) > 0"}]
    fixed, kept, dropped = apply_located(source, [change])
    assert kept == [change] and not dropped
    ast.parse(fixed)
    data = dict(_stall(findings).data)
    assert (f"# gpudoctor fix: {STALL} — workers kept alive between epochs: the first batch of each epoch "
            f"waited {data['first_batch_wait_ms']:.2f} ms for them to restart\n") in fixed
    assert "num_workers=int(opt.workers), persistent_workers=int(opt.workers) > 0)" in fixed
    golden("fix/persistent.diff", unified_diff(source, fixed, "epoch_stall.py"))
    # the image dump and the checkpoint: text, the measured ms quoted, never patched
    advice, batch = plan.advice  # the launch-bound finding's larger batch: text, never patched
    assert batch.code == "GD-RUN-LAUNCH-BOUND" and batch.reason.startswith("batch: ")
    assert advice.code == STALL and advice.reason.startswith("epoch_work: ")
    assert f"{data['epoch_work_ms']:.2f} ms an epoch" in advice.reason and "changes what the script does" in advice.reason
    assert f"({data['epoch_work_ms']:.2f} ms an epoch)" in advice.fix and "epoch % 10" in advice.fix
    # with the loader change of GD-RUN-DATALOADER the keyword is set once, both commented; the
    # workers are the --workers option's (its default now 8): --workers 0 must still run
    together, _, dropped = apply_located(source, plan.changes)
    assert not dropped and together.count("persistent_workers=") == 1
    assert "num_workers=int(opt.workers), persistent_workers=int(opt.workers) > 0" in together
    assert 'parser.add_argument("--workers", type=int, default=8)' in together
    ast.parse(together)


def test_no_workers_get_advice_only(recorded) -> None:
    findings, config = recorded
    source = SCRIPT.read_text(encoding="utf-8")
    # recorded without workers: no restart part, nothing to keep alive; the per-epoch work as text
    idle = dataclasses.replace(config, loaders=(dataclasses.replace(config.loaders[0], num_workers=0),))
    plan = plan_fix(locate(source), [_with_data(_stall(findings), worker_restart=0.0)], idle)
    assert not plan.changes and [a.reason.split(":")[0] for a in plan.advice] == ["epoch_work"]
    # the located DataLoader(...) has no workers: DataLoader would refuse persistent_workers there
    static = source.replace("num_workers=int(opt.workers)", "num_workers=0")
    plan = plan_fix(locate(static), [_stall(findings)], config)
    assert not plan.changes and [a.reason.split(":")[0] for a in plan.advice] == ["persistent", "epoch_work"]
    assert "line 18 has num_workers=0" in plan.advice[0].reason and plan.advice[0].fix == _stall(findings).fix
    plan = plan_fix(locate(source.replace(", num_workers=int(opt.workers)", "")), [_stall(findings)], config)
    assert not plan.changes and "has num_workers=0" in plan.advice[0].reason


def test_workers_kept_already_get_advice_only(recorded) -> None:
    findings, config = recorded
    source = SCRIPT.read_text(encoding="utf-8")
    static = source.replace("num_workers=int(opt.workers))", "num_workers=int(opt.workers), persistent_workers=True)")
    plan = plan_fix(locate(static), [_stall(findings)], config)
    assert not plan.changes and "has persistent_workers=True already" in plan.advice[0].reason
    # the planted ddp_no_set_epoch recorded on 2 H200s: persistent workers whose first batch of an
    # epoch still waits (an empty queue, not a restart): no persistent change, no advice for it
    run = load_run(ROOT / "fixtures" / "runs" / "ddp_no_set_epoch-2gpu")
    stall = _stall(list(diagnose(run)))
    assert dict(stall.data)["worker_restart"] == 0.0 and dict(stall.data)["first_batch_wait_ms"] > 0
    plan = plan_fix(locate(source), [stall], run.configs[min(run.configs)])
    assert not plan.changes and not plan.advice


def test_a_stall_without_epoch_parts_or_a_first_batch_wait_gets_no_persistent_change(recorded) -> None:
    findings, config = recorded
    source = SCRIPT.read_text(encoding="utf-8")
    # a stall every N steps with no epoch split (no data): nothing to plan, as before
    bare = Finding(code=STALL, severity=Severity.WARN, title=STALL, fix="# look at what the script does")
    plan = plan_fix(locate(source), [bare], config)
    assert not plan.changes and not plan.advice
    # epochs whose first batch does not wait: the per-epoch work alone, as text
    plan = plan_fix(locate(source), [_with_data(_stall(findings), first_batch_wait_ms=0.0, worker_restart=0.0)],
                    config)
    assert not plan.changes and [a.reason.split(":")[0] for a in plan.advice] == ["epoch_work"]
    # INFO: no patch, no advice
    info = dataclasses.replace(_stall(findings), severity=Severity.INFO)
    plan = plan_fix(locate(source), [info], config)
    assert not plan.changes and not plan.advice


def test_diff_leaves_the_file_untouched_and_the_advice_is_printed(recorded, tmp_path, monkeypatch, capsys) -> None:
    # the CLI flow with the recorded run as its baseline (no run here): --diff, --no-measure
    import gpudoctor.cli.run as run_cli
    from gpudoctor.cli.fix_flow import fix_script

    findings, _ = recorded
    script = tmp_path / "main.py"
    script.write_text(SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    outcome = SimpleNamespace(exit_code=0, manifest=SimpleNamespace(status="stopped"))
    monkeypatch.setattr(run_cli, "_one", lambda spec: (outcome, load_run(DCGAN), findings))
    monkeypatch.chdir(tmp_path)
    code = fix_script(Path("main.py"), (), write=False, measure=False, steps=60, repeats=2, out=tmp_path / "rd")
    out = capsys.readouterr().out
    assert code == 0
    assert script.read_text(encoding="utf-8") == SCRIPT.read_text(encoding="utf-8")
    assert not list(tmp_path.glob("main.py.orig*"))
    assert f"+# gpudoctor fix: {STALL} — workers kept alive between epochs" in out
    assert f"{STALL}: no patch (epoch_work: " in out and "nothing written (--diff)" in out


# the real script, from the fetched mirror of pytorch/examples (absent in CI: skipped)
_MIRRORS = next((p / ".mirror" for p in Path(__file__).resolve().parents if (p / ".mirror").is_dir()),
                Path("/nonexistent"))


def test_pytorch_examples_dcgan_gets_a_patch_for_its_top_finding(recorded) -> None:
    gitdir = _MIRRORS / "pytorch+examples" / "repo"
    if not gitdir.is_dir():
        pytest.skip("no mirror of pytorch/examples here")
    shown = subprocess.run(["git", "--git-dir", str(gitdir), "show", "HEAD:dcgan/main.py"], capture_output=True,
                           text=True)
    if shown.returncode != 0:
        pytest.skip("the mirror of pytorch/examples cannot be read")
    findings, config = recorded
    plan = plan_fix(locate(shown.stdout), findings, config)
    (change,) = [c for c in plan.changes if c.code == findings[0].code]
    fixed, kept, dropped = apply_located(shown.stdout, [change])
    assert change.kind == "persistent" and kept == [change] and not dropped
    ast.parse(fixed)
    assert "num_workers=int(opt.workers), persistent_workers=int(opt.workers) > 0)" in fixed
    # the image dumps and checkpoints; the launch-bound finding's larger batch
    assert [a.reason.split(":")[0] for a in plan.advice] == ["epoch_work", "batch"]


def test_workers_given_in_a_kwargs_dict_get_persistent_workers_merged_into_it(recorded) -> None:
    # pytorch/examples' mnist shape: num_workers in **train_kwargs on CUDA; never passed twice
    findings, config = recorded
    source = (ROOT / "fixtures" / "fix" / "helper_loop.py").read_text(encoding="utf-8")
    plan = plan_fix(locate(source), [_stall(findings)], config)
    (change,) = plan.changes
    fixed, _, dropped = apply_located(source, [change])
    assert change.kind == "persistent" and not dropped
    # num_workers only when CUDA is there: persistent exactly when the dict holds workers
    assert 'DataLoader(data, **{**train_kwargs, "persistent_workers": train_kwargs.get("num_workers", 0) > 0})' in fixed
    ast.parse(fixed)


def test_a_literal_worker_count_gets_persistent_workers_true(recorded) -> None:
    findings, config = recorded
    source = SCRIPT.read_text(encoding="utf-8").replace("num_workers=int(opt.workers)", "num_workers=2")
    (change,) = plan_fix(locate(source), [_stall(findings)], config).changes
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped and "num_workers=2, persistent_workers=True)" in fixed

"""``gpudoctor fix`` on a training step in a trainer class and in another module of the project:
golden diffs on look-alike scripts written here (``tests/fixtures/fix/trainer_class.py``, the
two-module project ``tests/fixtures/fix/two_module``), the run-dir copy of a patched module, and
the three real corpus scripts of that shape (read from the fetched mirrors, skipped without them)
planned from their H200 recordings (``tests/fixtures/fix/corpus_runs``)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.cli.fix import write_fixed
from gpudoctor.cli.fix_flow import _copy_module, patch_all
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.project import locate_project
from gpudoctor.fix.view import unified_diff
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.rundir import load_run
from gpudoctor.records.run import LoaderConfig, RankConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fix"
CLASS_SCRIPT = FIXTURES / "trainer_class.py"
PROJECT = FIXTURES / "two_module"
LOADER = LoaderConfig(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None,
                      batch_size=32, drop_last=False, sampler="RandomSampler", dataset="TensorDataset", batches=32)
CONFIG = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16, loaders=(LOADER,))
CODES = ("GD-RUN-LAUNCH-BOUND", "GD-RUN-DATALOADER", "GD-RUN-FP32-COMPUTE")


def findings(*codes: str, severity: Severity = Severity.WARN) -> list[Finding]:
    return [Finding(code=c, severity=severity, title=c, evidence=(), fix=f"the fix for {c}") for c in codes]


def test_trainer_class_is_located_through_self_attributes() -> None:
    found = locate(CLASS_SCRIPT.read_text(encoding="utf-8"))
    assert found.func.name == "_one_epoch" and found.step_func.name == "_one_step"
    assert (found.model, found.model_outer, found.optimizer, found.loss) == ("self.net", "self.net", "self.opt", "loss")
    assert found.model_assign.lineno == 14  # self.net = net.to(device), in __init__
    assert found.loader_call.lineno == 51  # make_loader's DataLoader(...), through Fitter(...) and main
    assert [s.lineno for s in found.forward] == [21, 22] and len(found.batch_moves) == 2


def test_trainer_class_golden_diff(golden) -> None:
    source = CLASS_SCRIPT.read_text(encoding="utf-8")
    plan = plan_fix(locate(source), findings(*CODES), CONFIG)
    fixed, dropped = patch_all({"": source}, CLASS_SCRIPT, plan.changes)
    assert not dropped and [c.kind for c in plan.changes] == [
        "compile", "loader", "cudnn_benchmark", "tf32", "bf16"]
    assert all(a.code == "GD-RUN-FP32-COMPUTE" or a.reason.startswith("batch: ") for a in plan.advice)
    ast.parse(fixed[""])
    assert "        self.net.compile()\n" in fixed[""] and fixed[""].count("# gpudoctor fix: GD-RUN-") >= 5
    golden("fix/class-trainer_class.diff", unified_diff(source, fixed[""], "trainer_class.py"))


def test_fp16_is_not_split_across_the_loop_and_its_step_helper() -> None:
    source = CLASS_SCRIPT.read_text(encoding="utf-8")
    old = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16,
                     device_name="Tesla V100-SXM2-16GB")
    plan = plan_fix(locate(source), findings("GD-RUN-FP32-COMPUTE"), old)
    assert "fp16" not in [c.kind for c in plan.changes]
    assert any("helper" in a.reason for a in plan.advice if a.reason.startswith("fp16"))


def test_info_findings_get_nothing_in_a_class() -> None:
    plan = plan_fix(locate(CLASS_SCRIPT.read_text(encoding="utf-8")), findings(*CODES, severity=Severity.INFO), CONFIG)
    assert not plan.changes and not plan.advice


def test_a_model_attribute_reassigned_outside_init_gets_text_advice() -> None:
    source = CLASS_SCRIPT.read_text(encoding="utf-8").replace(
        "    def fit(self, epochs):\n",
        "    def fit(self, epochs):\n        if epochs > 3:\n            self.net = self.net.half()\n")
    plan = plan_fix(locate(source), findings("GD-RUN-LAUNCH-BOUND"), CONFIG)
    assert not plan.changes
    assert [a.code for a in plan.advice] == ["GD-RUN-LAUNCH-BOUND"] * 2 and "self.net" in plan.advice[0].reason
    assert plan.advice[1].reason.startswith("batch: ")


def _project_diff(sources: dict[str, str], fixed: dict[str, str]) -> str:
    return "".join(unified_diff(sources[f], fixed[f], Path(f).relative_to(PROJECT).as_posix() if f else
                                "apps/counting/count.py") for f in sources if fixed[f] != sources[f])


def test_two_module_project_patches_the_package_trainer(golden) -> None:
    script = PROJECT / "apps" / "counting" / "count.py"
    source = script.read_text(encoding="utf-8")
    found = locate_project(script, source)
    assert Path(found.file) == (PROJECT / "toyfit" / "loop.py").resolve()
    assert Path(found.import_root) == PROJECT.resolve()
    assert isinstance(found.loop, ast.While) and found.model_outer == "self.net"
    assert found.loader_call is not None and found.loader_call.lineno == 20
    plan = plan_fix(found, findings(*CODES), CONFIG)
    assert {c.file for c in plan.changes} == {found.file}
    sources = {"": source, found.file: Path(found.file).read_text(encoding="utf-8")}
    fixed, dropped = patch_all(sources, script, plan.changes)
    assert not dropped and fixed[""] == source
    ast.parse(fixed[found.file])
    golden("fix/project-two_module.diff", _project_diff(sources, fixed))


def test_the_patched_module_is_what_the_run_dir_copy_imports(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    shutil.copytree(PROJECT, project)
    script = project / "apps" / "counting" / "count.py"
    found = locate_project(script, script.read_text(encoding="utf-8"))
    plan = plan_fix(found, findings("GD-RUN-DATALOADER"), CONFIG)
    sources = {"": script.read_text(encoding="utf-8"), found.file: Path(found.file).read_text(encoding="utf-8")}
    fixed, _ = patch_all(sources, script, plan.changes)
    copy = tmp_path / "run" / "fix-1-loader"
    copy.mkdir(parents=True)
    (copy / "count.py").write_text(fixed[""], encoding="utf-8")
    _copy_module(copy, Path(found.file), Path(found.import_root), fixed[found.file])
    assert (copy / "toyfit" / "__init__.py").is_file()
    probe = ("import toyfit.loop; print(toyfit.loop.__file__); "
             "print('num_workers=8' in open(toyfit.loop.__file__).read())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=copy, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(project), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(copy / "toyfit" / "loop.py"), "True"]
    # --write: the module gets its own backup, the original project is what was read
    backup = write_fixed(Path(found.file), sources[found.file], fixed[found.file])
    assert backup.name == "loop.py.orig" and backup.read_text(encoding="utf-8") == sources[found.file]
    assert Path(found.file).read_text(encoding="utf-8") == fixed[found.file]


def test_a_site_packages_module_is_never_followed(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    shutil.copytree(PROJECT, site)
    script = site / "apps" / "counting" / "count.py"
    found = locate_project(script, script.read_text(encoding="utf-8"))
    assert found.loop is None and found.file == ""


# --- the real corpus scripts of this shape, planned from their H200 recordings ---------------------
# the bare mirrors the search tool's fetch makes, in a folder above the checkout (absent in CI: skipped)
_MIRRORS = next((p / ".mirror" for p in Path(__file__).resolve().parents if (p / ".mirror").is_dir()),
                Path("/nonexistent"))
CORPUS = {  # recording -> (mirror, script in it, the file the patch must touch)
    "ddp_series_single_gpu": ("pytorch+examples", "distributed/ddp-tutorial-series/single_gpu.py", ""),
    "mingpt_adder": ("karpathy+minGPT", "projects/adder/adder.py", "mingpt/trainer.py"),
    "mingpt_chargpt": ("karpathy+minGPT", "projects/chargpt/chargpt.py", "mingpt/trainer.py"),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_scripts_with_a_trainer_class_get_a_patch_for_their_top_finding(name: str, tmp_path: Path) -> None:
    mirror, rel, patched = CORPUS[name]
    gitdir = _MIRRORS / mirror / "repo"
    if not gitdir.is_dir():
        pytest.skip(f"no mirror of {mirror} here")
    folder = rel.split("/")[0] if patched == "" else "."
    archive = subprocess.run(["git", "--git-dir", str(gitdir), "archive", "HEAD", folder], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"the mirror of {mirror} cannot be read")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    run = load_run(FIXTURES / "corpus_runs" / name)
    found_all = list(diagnose(run))
    top = found_all[0]
    script = tmp_path / rel
    source = script.read_text(encoding="utf-8")
    found = locate_project(script, source)
    plan = plan_fix(found, found_all, run.configs[min(run.configs)])
    sources = {"": source}
    if found.file:
        sources[found.file] = Path(found.file).read_text(encoding="utf-8")
    fixed, dropped = patch_all(sources, script, plan.changes)
    assert not dropped
    assert any(c.code == top.code for c in plan.changes), (top.code, plan.advice)
    changed = [f for f in sources if fixed[f] != sources[f]]
    assert [Path(f).relative_to(tmp_path).as_posix() if f else "" for f in changed] == [patched]
    for f in changed:
        ast.parse(fixed[f])
        assert f"# gpudoctor fix: {top.code} — " in fixed[f]

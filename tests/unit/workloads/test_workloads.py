"""The example workloads: registry consistency, stand-alone scripts (torch only), and one tiny
CPU run end to end (the others run on the GPU job and in benchmarks/run_verdicts.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.analysis import diagnose as diagnose_module
from gpudoctor.workloads import WORKLOADS

PKG = Path(__file__).resolve().parents[3] / "src" / "gpudoctor" / "workloads"
SRC = PKG.parents[1]


def _codes_in_analysis() -> set[str]:
    codes = set()
    for path in (PKG.parent / "analysis").glob("*_rules.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id.startswith("CODE_") for t in node.targets):
                    codes.add(node.value.value)
    return codes


def test_registry_matches_modules_and_codes():
    modules = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    assert set(WORKLOADS) == modules
    known = _codes_in_analysis()
    for w in WORKLOADS.values():
        assert w.planted is None or w.planted in known, (w.name, w.planted)
    assert [w.name for w in WORKLOADS.values() if w.planted is None] == ["clean"]
    assert diagnose_module.RULES  # the rules the codes belong to are wired in


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_is_a_standalone_torch_script(name):
    tree = ast.parse((PKG / f"{name}.py").read_text())
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: relative import"
            tops.add(node.module.split(".")[0])
    assert "gpudoctor" not in tops
    assert tops <= set(sys.stdlib_module_names) | {"torch", "__future__"}, tops
    text = (PKG / f"{name}.py").read_text()
    assert '"tiny"' in text and '"small"' in text and '"medium"' in text and "--steps" in text


def test_argv():
    assert WORKLOADS["clean"].argv(size="tiny", steps=3, python="py") == [
        "py", "-m", "gpudoctor.workloads.clean", "--size", "tiny", "--steps", "3"]
    assert WORKLOADS["straggler"].argv(python="py")[:6] == [
        "py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m"]
    assert "--nproc_per_node=1" in WORKLOADS["ddp_no_set_epoch"].argv(nproc=1)


def test_nan_loss_runs_on_cpu_and_diverges():
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor.workloads.nan_loss", "--size", "tiny", "--steps", "10"],
        capture_output=True, text=True, timeout=120, cwd=SRC,
        env={"PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 10 loss nan" in proc.stdout

"""The corpus harness (benchmarks/corpus): patches, synthetic data, the A/B judgement, the tables.

The patch test reads the public scripts from the fetched mirrors when this machine has them
(they are never committed); elsewhere it is skipped.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[3] / "benchmarks" / "corpus"
sys.path.insert(0, str(CORPUS))

import ab  # noqa: E402
import fixes  # noqa: E402
import make_data  # noqa: E402
import manifest  # noqa: E402
import tables  # noqa: E402

# the bare mirrors the search tool's fetch makes, beside the repository (absent in CI: skipped)
_MIRROR_ROOT = Path(__file__).resolve().parents[3].parent / ".mirror"
MIRRORS = {"pytorch-examples": _MIRROR_ROOT / "pytorch+examples" / "repo",
           "minGPT": _MIRROR_ROOT / "karpathy+minGPT" / "repo"}


def _upstream(repo: str, rel: str) -> str | None:
    gitdir = MIRRORS[repo]
    if not gitdir.is_dir():
        return None
    done = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"HEAD:{rel}"],
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def test_every_listed_fix_is_written():
    for s in manifest.SCRIPTS:
        assert s.fixes, s.name
        for kind in s.fixes:
            assert kind in fixes.PATCHES[s.source], (s.name, kind)


@pytest.mark.parametrize(("code", "kind"), [
    ("GD-RUN-FP32-COMPUTE", "bf16"), ("GD-RUN-DATALOADER", "loader"), ("GD-RUN-HOST-SYNC", "nosync"),
    ("GD-RUN-LAUNCH-BOUND", "batch"), ("GD-RUN-H2D-PAGEABLE", "nonblocking"),
    ("GD-RUN-H2D-BLOCKING", "nonblocking"), ("GD-RUN-MEM-LEAK", None), (None, None),
])
def test_finding_code_to_fix_kind(code, kind):
    assert fixes.kind_for(code) == kind


def test_patch_refuses_a_missing_snippet():
    with pytest.raises(fixes.PatchError, match="expected 1 occurrence"):
        fixes.patch_text("vae", "nosync", "vae/main.py", "print('no loss here')\n")


@pytest.mark.parametrize("source", sorted(fixes.PATCHES))
def test_patches_apply_once_to_upstream_and_compile(source):
    for kind, patches in fixes.PATCHES[source].items():
        for rel in dict.fromkeys(p for p, _, _ in patches):
            repo = "minGPT" if rel.startswith("mingpt/") else "pytorch-examples"
            text = _upstream(repo, rel)
            if text is None:
                pytest.skip(f"no mirror of {repo} on this machine")
            patched = fixes.patch_text(source, kind, rel, text, workers=3)
            assert patched != text
            assert "{W}" not in patched
            compile(patched, rel, "exec")


def test_mnist_idx_files_have_torchvision_names_and_headers(tmp_path):
    make_data.mnist(tmp_path, train=12, test=5)
    raw = tmp_path / "MNIST" / "raw"
    images = (raw / "train-images-idx3-ubyte").read_bytes()
    assert struct.unpack(">IIII", images[:16]) == (2051, 12, 28, 28)
    assert len(images) == 16 + 12 * 28 * 28
    labels = (raw / "t10k-labels-idx1-ubyte").read_bytes()
    assert struct.unpack(">II", labels[:8]) == (2049, 5)
    assert max(labels[8:]) <= 9
    assert {p.name for p in raw.iterdir()} == {
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}


def test_char_text_has_65_characters(tmp_path):
    make_data.char_text(tmp_path / "input.txt", 5000)
    text = (tmp_path / "input.txt").read_text()
    assert len(text) == 5000 and len(set(text)) == 65


def test_judge_pairs_rounds_and_reports_spread():
    m = ab.judge([100.0, 110.0], [150.0, 143.0])
    assert m["gains"] == pytest.approx([0.5, 0.3])
    assert m["gain_median"] == pytest.approx(0.4)
    assert m["saving_median"] == pytest.approx(1 - 1 / 1.4)
    assert m["noise_a"] == pytest.approx(10 / 105)
    assert m["every_round_faster"]


def test_tables_render_a_row_of_each():
    row = {"name": "mnist", "status": "stopped", "wall_s": 12.0, "step_ms": 2.0, "mean_step_ms": 2.5,
           "throughput": 32000.0, "unit": "samples/s", "gpu_busy": 0.4, "compute_share": 0.5,
           "sync_share": 0.1, "data_wait_share": 0.4,
           "verdict": {"code": "GD-RUN-DATALOADER", "title": "Data-loader bound", "expected_gain": 0.4},
           "top_kernels": [{"name": "k", "count": 3, "share_of_busy": 0.5}]}
    text = tables.verdicts_markdown({"rows": [row], "steps": 60, "sources": {}})
    assert "| mnist | stopped | 12.0 | GD-RUN-DATALOADER: Data-loader bound | 40% | 2.00 / 2.50 |" in text
    ab_row = {"name": "mnist", "verdict_code": "GD-RUN-DATALOADER", "fix": "loader", "predicted_saving": 0.4,
              "measured": ab.judge([100.0, 110.0], [150.0, 143.0]), "outcome": "confirmed",
              "after_verdict": {"code": None}}
    text = tables.ab_markdown({"rows": [ab_row], "rounds": 2, "bar": 0.1, "sources": {}})
    assert "| mnist | GD-RUN-DATALOADER | loader | 40% | 29% | +40% [+30%, +50%] | 10% | confirmed | none |" in text


def test_plan_picks_the_fix_of_each_verdict(tmp_path):
    import argparse
    import json

    rows = [
        {"name": "mnist", "status": "stopped",
         "verdict": {"code": "GD-RUN-DATALOADER", "title": "t", "expected_gain": 0.4}},
        {"name": "vae", "status": "stopped", "verdict": {"code": None, "title": "none", "expected_gain": None}},
        {"name": "dcgan", "status": "stopped", "verdict": {"code": "GD-RUN-MEM-LEAK", "title": "t", "expected_gain": None}},
        {"name": "word_language_model", "status": "stopped",
         "verdict": {"code": "GD-RUN-DATALOADER", "title": "t", "expected_gain": 0.2}},
        {"name": "mingpt_adder", "status": "stopped",
         "verdict": {"code": "GD-RUN-LAUNCH-BOUND", "title": "t", "expected_gain": 0.5}},
    ]
    path = tmp_path / "corpus-verdicts.json"
    path.write_text(json.dumps({"rows": rows}))
    args = argparse.Namespace(fix="mingpt_adder=compile", only="", all_fixes=False, verdicts=path, skip_kinds="")
    plan = {r["name"]: r for r in ab.plan(args)}
    assert plan["mnist"]["fix"] == "loader" and "outcome" not in plan["mnist"]
    assert plan["mnist"]["predicted_saving"] == 0.4
    assert plan["vae"]["outcome"] == "no WARN: no fix needed"
    assert plan["dcgan"]["outcome"] == "no hand fix for GD-RUN-MEM-LEAK"
    assert plan["word_language_model"]["outcome"] == "fix 'loader' not written for this script"
    assert plan["mingpt_adder"]["fix"] == "compile"

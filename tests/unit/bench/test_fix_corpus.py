"""Issue 24's corpus bar (benchmarks/corpus/fix_corpus.py): which reference a row is judged against.

The rows are those of the first H200 call (benchmarks/results/fix/corpus-1.json): imagenet_resnet18's
loader patch measured +163% in that call, its hand fix +224% in another call whose baseline ran
1,229-1,317 samples/s against 1,673 in the fix's call; a launch-bound row's hand fix was a larger
batch, which fix prints as advice and never patches, so it is no bar for the patch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))

import fix_corpus  # noqa: E402

ROWS = {r["name"]: r for r in json.loads((ROOT / "benchmarks/results/fix/corpus-1.json").read_text())["rows"]}


def test_a_hand_fix_from_another_call_is_the_bar_only_without_a_same_call_try() -> None:
    row = ROWS["imagenet_resnet18"]
    assert fix_corpus.corpus_outcome(row["fix"], row["hand_fix"], None) == (
        "not met: +163% vs hand fix +224% - noise (another call)")
    tried = {"knobs": "num_workers=8,persistent_workers,prefetch_factor=4,non_blocking", "gain": 1.70, "noise": 0.09}
    assert fix_corpus.corpus_outcome(row["fix"], row["hand_fix"], tried).startswith(
        "met: +163% vs --try num_workers=8,persistent_workers,prefetch_factor=4,non_blocking +170% - noise (same call)")
    assert fix_corpus.corpus_outcome(row["fix"], row["hand_fix"], {**tried, "gain": 1.9}).startswith("not met: ")


def test_a_larger_batch_is_no_bar_for_the_compile_patch() -> None:
    fix = {"changes": [{"kind": "compile", "kept": True}], "gain": 0.4, "advice": [{"code": "GD-RUN-LAUNCH-BOUND"}]}
    hand = {"fix": "batch", "gain": 3.11, "noise": 0.14}
    assert fix_corpus.corpus_outcome(fix, hand, None) == (
        "patched: +40% (hand fix 'batch' is not what fix patches; bar: --reference try)")
    assert fix_corpus.corpus_outcome(fix, hand, {"knobs": "compile", "gain": 0.45, "noise": 0.1}).startswith("met: ")


def test_no_change_kept_and_a_failed_fix_say_so() -> None:
    row = ROWS["imagenet_resnet50"]
    assert fix_corpus.corpus_outcome(row["fix"], row["hand_fix"], None) == "no change kept; advice only"
    assert fix_corpus.corpus_outcome({}, None, None) == "fix failed (see its log)"


def test_the_table_shows_the_same_call_reference() -> None:
    row = {**ROWS["imagenet_resnet18"], "try": {"knobs": "num_workers=8", "gain": 1.7, "noise": 0.09}}
    text = fix_corpus.markdown({"gpu": "NVIDIA H200", "steps": 60, "repeats": 2, "rows": [row]})
    assert "| --try (noise) |" in text and "| num_workers=8 +170% ± 9% |" in text

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


PLANTED = {r["name"]: r for r in json.loads((ROOT / "benchmarks/results/fix/planted-1.json").read_text())["planted"]}
PLANTED.update({r["name"]: r for r in
                json.loads((ROOT / "benchmarks/results/fix/planted-2.json").read_text())["planted"]})


def test_the_floor_takes_the_noise_of_both_measurements() -> None:
    # fp32_convnet on an H200: fix +170.7% +- 2.5%, --try +171.2% +- 0.4%; the --try noise alone put the
    # floor at +170.8%, 0.1 point above a gain the fix's own noise cannot tell from it
    row = PLANTED["fp32_convnet"]
    fix, tried = row["fix"], row["try"]
    assert tried["gain"] - tried["noise"] > fix["gain"]
    assert fix_corpus.floor(tried, fix) < fix["gain"]
    assert fix_corpus.planted_outcome("fp32_convnet", fix, tried) == "met: +171% vs --try +171% - noise"
    assert fix_corpus.planted_outcome("fp32_convnet", fix, {**tried, "gain": 1.8}).startswith("not met: ")


def test_a_try_whose_knobs_did_not_apply_is_no_reference() -> None:
    row = PLANTED["pageable_copies"]
    void = {**row["try"], "notes": ["pin_memory: not applied: the script built no torch DataLoader (...)",
                                    "non_blocking: not applied: no copy from pinned host memory to the GPU was seen"]}
    assert not fix_corpus.try_applied(void)
    assert fix_corpus.try_applied(row["try"])  # as stored: only non_blocking said so then
    assert fix_corpus.planted_outcome("pageable_copies", row["fix"], void) == (
        "patched: +263% (--try: its knobs not applied (see its notes); the fix's own A/B is the measure)")
    assert fix_corpus.corpus_outcome(row["fix"], None, void) == (
        "patched: +263% (no hand fix; bar: --reference try)")


def test_planted_rows_without_a_patch_say_why() -> None:
    assert fix_corpus.planted_outcome("clean", PLANTED["clean"]["fix"], PLANTED["clean"]["try"]) == (
        "no change proposed (no finding with a code fix: as expected)")
    row = PLANTED["item_every_step"]
    assert fix_corpus.planted_outcome("item_every_step", row["fix"], row["try"]) == (
        "no change kept (its finding has no --try knob: the fix's own A/B decided)")


def test_rescore_changes_outcomes_only() -> None:
    doc = json.loads((ROOT / "benchmarks/results/fix/planted-1.json").read_text())
    again = fix_corpus.rescore(doc)
    assert [r["outcome"] for r in again["planted"]] == [r["outcome"] for r in doc["planted"]]
    stripped = lambda d: [{k: v for k, v in r.items() if k != "outcome"} for r in d["planted"]]  # noqa: E731
    assert stripped(again) == stripped(doc)

"""``memory estimate --what-if`` on the CPU: checkpointing, optimizer state sizes, micro-batches."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpudoctor.analysis.memory_whatif import (
    CheckpointSaved,
    adafactor_state_bytes,
    adamw8bit_state_bytes,
    micro_batch_plan,
)
from gpudoctor.cli.app import app
from gpudoctor.memory.estimate import EstimateConfig, default_loss, estimate_memory
from gpudoctor.memory.inputs import batch_factory
from gpudoctor.memory.whatif import checkpoint_blocks, parse_what_if, what_if
from gpudoctor.records.memory import WhatIf
from gpudoctor.report.memory_modules_view import render_what_if

sys.path.insert(0, str(Path(__file__).parent))
import toy_models  # noqa: E402

CONFIG = EstimateConfig(batch_size=64, device="cpu", probe_batches=(8, 16))
MAKE = batch_factory("image:32:10")


def _answer(change: str) -> WhatIf:
    est = estimate_memory(toy_models.blocks, MAKE, CONFIG)
    return what_if(est, change, model_factory=toy_models.blocks, make_batch=MAKE, config=CONFIG,
                   loss_fn=default_loss)


def test_checkpointing_a_cpu_model_gives_a_smaller_activation_figure() -> None:
    a = _answer("checkpointing")
    assert a.part == "activations" and 0 < a.after_bytes < a.before_bytes
    # each block saves fc1's input, fc1's output (GELU input), GELU's output (fc2 input): 64 + 256 +
    # 256 floats per sample, of which checkpointing keeps the 64-float input: the figure must
    # shrink by more than half with 6 blocks
    assert a.after_bytes < 0.5 * a.before_bytes
    assert a.peak_before_bytes - a.peak_after_bytes == a.before_bytes - a.after_bytes
    assert "6 Block blocks checkpointed" in a.how


def test_checkpoint_blocks_pick_the_repeated_class() -> None:
    names = [n for n, _ in checkpoint_blocks(toy_models.blocks())]
    assert names == [str(i) for i in range(1, 7)]
    assert checkpoint_blocks(toy_models.mlp()) == []
    a = what_if(estimate_memory(toy_models.mlp, MAKE, CONFIG), "checkpointing", model_factory=toy_models.mlp,
                make_batch=MAKE, config=CONFIG, loss_fn=default_loss)
    assert a.after_bytes == a.before_bytes and a.how == "no repeated block found to checkpoint"


def test_checkpointed_bytes_are_outside_plus_inputs_plus_one_block() -> None:
    saved = CheckpointSaved(batch_size=8, total_bytes=1000, outside_bytes=100, block_input_bytes=60,
                            largest_block_bytes=150)
    assert saved.checkpointed_bytes == 310


def test_optimizer_state_sizes_from_shapes() -> None:
    # Linear(1024, 512) weight + bias: row 1024... factored over the last two dimensions
    assert adafactor_state_bytes([(512, 1024), (512,)]) == 4 * (512 + 1024) + 4 * 512
    assert adafactor_state_bytes([(2, 3, 4, 5)]) == 4 * (2 * 3 * 4 + 2 * 3 * 5)
    n = 1 << 20
    assert adamw8bit_state_bytes([n]) == 2 * (n + 4 * (n // 256))
    assert adamw8bit_state_bytes([100]) == 800  # under min_8bit_size: two fp32 moments
    a = _answer("adamw8bit")
    assert a.part == "optimizer state" and a.after_bytes < a.before_bytes / 3
    b = _answer("adafactor")
    assert b.after_bytes < a.after_bytes


def test_micro_batch_plan_and_answer() -> None:
    assert micro_batch_plan(64, 16) == (16, 4)
    assert micro_batch_plan(10, 4) == (4, 3)
    assert micro_batch_plan(8, 32) == (8, 1)
    a = _answer("micro-batch=16")
    assert a.after_bytes * 4 == pytest.approx(a.before_bytes, rel=0.01)
    assert any("4 accumulation steps of 16" in n for n in a.notes)
    assert any("BatchNorm" in n for n in a.notes)


def test_parse_what_if_rejects_unknown_changes() -> None:
    assert parse_what_if("micro-batch=8") == ("micro-batch", 8)
    for bad in ("micro-batch=0", "lora", "checkpointing=2"):
        with pytest.raises(ValueError, match="use one of checkpointing"):
            parse_what_if(bad)


def test_cli_what_if_json_and_bad_value(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    runner = CliRunner()
    result = runner.invoke(app, ["memory", "estimate", "--model", "toy_models:blocks", "--input", "image:32:10",
                                 "-b", "64", "--device", "cpu", "--what-if", "checkpointing",
                                 "--what-if", "micro-batch=8", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    changes = [w["change"] for w in payload["what_if"]]
    assert changes == ["checkpointing", "micro-batch=8"] and payload["batch_size"] == 64
    bad = runner.invoke(app, ["memory", "estimate", "--model", "toy_models:blocks", "--input", "image:32:10",
                              "-b", "64", "--device", "cpu", "--what-if", "lora"])
    assert bad.exit_code != 0 and "use one of checkpointing" in bad.output


@pytest.mark.parametrize("width", [80, 120])
def test_what_if_table_renders(width: int, golden) -> None:
    mib = 1 << 20
    answers = [
        WhatIf(change="checkpointing", part="activations", before_bytes=800 * mib, after_bytes=200 * mib,
               peak_before_bytes=1200 * mib, peak_after_bytes=600 * mib,
               how="6 Block blocks checkpointed: saved tensors per sample 12.0 MiB -> 3.0 MiB",
               notes=("costs about one more forward of each block per step",)),
        WhatIf(change="adamw8bit", part="optimizer state", before_bytes=400 * mib, after_bytes=101 * mib,
               peak_before_bytes=1200 * mib, peak_after_bytes=901 * mib, how="two uint8 states",
               notes=("now: adamw (400.0 MiB)",)),
    ]
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(render_what_if(answers))
    golden(f"memory_what_if_{width}.txt", buf.getvalue())

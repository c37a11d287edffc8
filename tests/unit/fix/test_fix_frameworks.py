"""Frameworks that drive the step (fix/frameworks.py): each finding's fix is the framework's own
knob, a source change on its call where that is a plain keyword, else advice naming it."""

from __future__ import annotations

from tests.support.fix_planning import STALL_DATA, advice, planned

LIGHTNING = """
import lightning as L
import torch
import torch.nn as nn


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    data = torch.utils.data.TensorDataset(torch.randn(16, 3, 8, 8), torch.zeros(16).long())
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer = L.Trainer(max_epochs=1, accelerator="auto")
    trainer.fit(Lit(), loader)


if __name__ == "__main__":
    main()
"""


def _change(plan, kind):
    return next(c for c in plan.changes if c.kind == kind)


def test_lightning_trainer_keywords_are_patched_and_the_rest_named():
    _, plan, fixed = planned(LIGHTNING, "GD-RUN-FP32-COMPUTE", "GD-RUN-DATALOADER", "GD-RUN-LAUNCH-BOUND")
    assert dict(_change(plan, "bf16").ops[0].kwargs) == {"precision": '"bf16-mixed"'}
    assert dict(_change(plan, "cudnn_benchmark").ops[0].kwargs) == {"benchmark": "True"}
    assert 'L.Trainer(max_epochs=1, accelerator="auto", benchmark=True, precision="bf16-mixed")' in fixed
    assert 'set_float32_matmul_precision("high")' in advice(plan, "tf32")
    assert "train_dataloader()" in advice(plan, "loader") and "num_workers=8" in advice(plan, "loader")
    assert "torch.compile(model)" in advice(plan, "compile")


def test_lightning_1x_spelling_and_a_configured_precision():
    one_x = LIGHTNING.replace("import lightning as L", "import pytorch_lightning as L").replace(
        'accelerator="auto"', "gpus=1, precision=32")
    _, plan, fixed = planned(one_x, "GD-RUN-FP32-COMPUTE")
    assert 'L.Trainer(max_epochs=1, gpus=1, precision="bf16", benchmark=True)' in fixed  # gpus= is 1.x: "bf16", not "bf16-mixed"
    configured = LIGHTNING.replace('accelerator="auto"', "precision=cfg.precision")
    _, plan, fixed = planned(configured, "GD-RUN-FP32-COMPUTE")
    assert "precision=cfg.precision at line" in advice(plan, "bf16") and "reads your configuration" in advice(plan, "bf16")
    starred = LIGHTNING.replace('accelerator="auto"', "**cfg")
    _, plan, _ = planned(starred, "GD-RUN-FP32-COMPUTE")
    assert "takes **kwargs" in advice(plan, "bf16")


HF = """
from transformers import Trainer, TrainingArguments


def main(model, train_set):
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=8)
    Trainer(model=model, args=args, train_dataset=train_set).train()
"""


def test_hf_training_arguments():
    _, plan, fixed = planned(HF, "GD-RUN-FP32-COMPUTE", "GD-RUN-DATALOADER", "GD-RUN-LAUNCH-BOUND")
    assert ("TrainingArguments(output_dir=\"out\", per_device_train_batch_size=8, tf32=True, bf16=True, "
            "dataloader_num_workers=8, dataloader_persistent_workers=True, "
            "torch_compile=True)") in fixed.replace("\n", "")  # pinned by default: not given again
    assert "cudnn.benchmark = True before trainer.train()" in advice(plan, "cudnn_benchmark")
    assert "dataloader_pin_memory=True" in advice(plan, "non_blocking")
    # alpaca-lora's fp16=True: bf16=True beside it would make TrainingArguments raise; no persistent
    # workers without a worker count in the call
    fp16 = HF.replace('per_device_train_batch_size=8', 'per_device_train_batch_size=8, fp16=True')
    _, plan, fixed = planned(fp16, "GD-RUN-FP32-COMPUTE", "GD-RUN-PERIODIC-STALL", data=STALL_DATA)
    assert "bf16=True" not in fixed and "runs mixed precision already (fp16=True)" in advice(plan, "bf16")
    assert "needs dataloader_num_workers > 0" in advice(plan, "persistent")
    elsewhere = 'from transformers import Trainer\n\n\ndef main(model, args, data):\n    Trainer(model=model, args=args, train_dataset=data).train()\n'
    _, plan, _ = planned(elsewhere, "GD-RUN-FP32-COMPUTE")
    assert "TrainingArguments(bf16=True)" in advice(plan, "bf16") and not plan.changes


ACCELERATE = """
import torch
from accelerate import Accelerator


def main(model, data):
    accelerator = Accelerator(gradient_accumulation_steps=1)
    opt = torch.optim.AdamW(model.parameters())
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(2):
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
"""


def test_accelerate_mixed_precision_and_dynamo():
    _, plan, fixed = planned(ACCELERATE, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND")
    assert 'Accelerator(gradient_accumulation_steps=1, mixed_precision="bf16", dynamo_backend="inductor")' in fixed
    assert "torch.autocast" not in fixed and ".compile()" not in fixed
    set_already = ACCELERATE.replace("gradient_accumulation_steps=1", 'mixed_precision="bf16"')
    _, plan, _ = planned(set_already, "GD-RUN-FP32-COMPUTE")
    assert "runs mixed precision already (mixed_precision='bf16')" in advice(plan, "bf16")


def test_no_framework_no_change_in_plan():
    plain = ACCELERATE.replace("from accelerate import Accelerator\n", "").replace(
        "    accelerator = Accelerator(gradient_accumulation_steps=1)\n", "").replace(
        "    model, opt, loader = accelerator.prepare(model, opt, loader)\n", "").replace(
        "accelerator.backward(loss)", "loss.backward()").replace("def main(model, data):", "def main(data):\n"
        "    model = torch.nn.Linear(4, 2)")
    _, plan, fixed = planned(plain, "GD-RUN-FP32-COMPUTE")
    assert "torch.autocast" in fixed  # the located loop is patched as before


def test_accelerate_precision_from_the_scripts_own_option():
    """accelerate's nlp_example: ``Accelerator(mixed_precision=args.mixed_precision)`` with
    ``--mixed_precision`` choosing among no/fp16/bf16/fp8: a command-line change, not a patch."""
    source = ACCELERATE.replace("import torch\n", "import argparse\nimport torch\n").replace(
        "accelerator = Accelerator(gradient_accumulation_steps=1)",
        "p = argparse.ArgumentParser()\n    p.add_argument('--mixed_precision', type=str, default=None, "
        "choices=['no', 'fp16', 'bf16', 'fp8'])\n    args = p.parse_args()\n"
        "    accelerator = Accelerator(mixed_precision=args.mixed_precision)")
    _, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE")
    bf16 = _change(plan, "bf16")
    assert bf16.ops == () and [(e.flags, e.value) for e in bf16.switches] == [(("--mixed_precision",), "bf16")]
    assert "mixed_precision=args.mixed_precision)" in fixed
    no_choice = source.replace(", choices=['no', 'fp16', 'bf16', 'fp8']", "")
    _, plan, _ = planned(no_choice, "GD-RUN-FP32-COMPUTE")
    assert "reads your configuration" in advice(plan, "bf16")  # no choices: the spelling is not known


def test_hydra_config_override_on_the_command_line():
    """A Hydra script whose Trainer takes its keywords from the config: the change is Hydra's
    ``++trainer.precision=bf16-mixed`` override (add or override) on the command line."""
    source = LIGHTNING.replace("import lightning as L\n", "import hydra\nimport lightning as L\n").replace(
        "def main():", '@hydra.main(config_path="conf", config_name="train", version_base=None)\ndef main(cfg):').replace(
        'L.Trainer(max_epochs=1, accelerator="auto")', "L.Trainer(**cfg.trainer)")
    _, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE")
    assert "L.Trainer(**cfg.trainer)" in fixed  # the source is not patched
    flags = {c.kind: [e.flags[0] for e in c.switches] for c in plan.changes}
    assert flags["bf16"] == ["++trainer.precision=bf16-mixed"] and flags["cudnn_benchmark"] == ["++trainer.benchmark=true"]
    from gpudoctor.cli.fix_flow import argv_for

    assert argv_for(("python", "train.py", "data=x"), plan.changes)[0] == (
        "data=x", "++trainer.benchmark=true", "++trainer.precision=bf16-mixed")
    keyword = source.replace("L.Trainer(**cfg.trainer)", "L.Trainer(precision=cfg.train.precision)")
    _, plan, _ = planned(keyword, "GD-RUN-FP32-COMPUTE")
    assert [e.flags[0] for e in _change(plan, "bf16").switches] == ["++train.precision=bf16-mixed"]

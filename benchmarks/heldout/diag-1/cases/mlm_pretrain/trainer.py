"""A cut-down, HF-flavoured Trainer: TrainingArguments, compute_loss, training_step."""
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader


@dataclass
class TrainingArguments:
    max_steps: int = 300
    per_device_train_batch_size: int = 32
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    logging_steps: int = 50
    bf16: bool = True
    dataloader_num_workers: int = 0
    dataloader_pin_memory: bool = True
    seed: int = 42


class ExponentialMovingAverage:
    def __init__(self, beta=0.98):
        self.beta = beta
        self.value = None

    def update(self, v):
        self.value = v if self.value is None else self.beta * self.value + (1 - self.beta) * v


class Trainer:
    def __init__(self, model, args, train_dataset, data_collator):
        self.args = args
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device)
        self.train_dataset = train_dataset
        self.data_collator = data_collator
        self.optimizer = None
        self.lr_scheduler = None
        self.global_step = 0

    # -- setup -----------------------------------------------------------------
    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          collate_fn=self.data_collator,
                          num_workers=self.args.dataloader_num_workers,
                          pin_memory=self.args.dataloader_pin_memory and self.device == "cuda")

    def create_optimizer_and_scheduler(self):
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2 and "embed" not in n]
        rest = [p for n, p in self.model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.args.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=self.args.learning_rate, fused=self.device == "cuda")
        w = self.args.warmup_steps
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / w))

    def _prepare_inputs(self, inputs):
        return {k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}

    # -- hooks subclasses override --------------------------------------------
    def compute_loss(self, model, inputs):
        return model(**inputs)["loss"]

    def training_step(self, model, inputs):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.args.bf16 and self.device == "cuda"):
            loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def log(self, logs):
        logs = {k: round(v, 4) if isinstance(v, float) else v for k, v in logs.items()}
        print({"step": self.global_step, **logs}, flush=True)

    # -- loop ------------------------------------------------------------------
    def train(self):
        torch.manual_seed(self.args.seed)
        self.create_optimizer_and_scheduler()
        loader = self.get_train_dataloader()
        t0 = time.perf_counter()
        while self.global_step < self.args.max_steps:
            for inputs in loader:
                self.training_step(self.model, inputs)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.global_step += 1
                self.on_step_end()
                if self.global_step % self.args.logging_steps == 0:
                    self.log({"elapsed": time.perf_counter() - t0, **self.logs()})
                if self.global_step >= self.args.max_steps:
                    break

    def on_step_end(self):
        pass

    def logs(self):
        return {}

"""Trainer subclass that distills a large teacher classifier into a small student."""
import logging
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from transformers import Trainer

logger = logging.getLogger(__name__)


class DistillTrainer(Trainer):
    def __init__(self, *args, teacher=None, alpha: float = 0.5, temperature: float = 2.0, **kwargs):
        super().__init__(*args, **kwargs)
        if teacher is None:
            raise ValueError("DistillTrainer needs a teacher model")
        self.teacher = teacher
        self.alpha = alpha
        self.temperature = temperature
        self.losses: Dict[str, torch.Tensor] = {"kd": 0.0, "ce": 0.0}
        self._loss_steps = 0

    def _kd_term(self, student_logits, teacher_logits):
        t = self.temperature
        return F.kl_div(
            F.log_softmax(student_logits / t, dim=-1),
            F.softmax(teacher_logits / t, dim=-1),
            reduction="batchmean",
        ) * (t * t)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        teacher_outputs = self.teacher(**inputs)
        ce = F.cross_entropy(outputs.logits, labels)
        kd = self._kd_term(outputs.logits, teacher_outputs.logits)
        loss = self.alpha * kd + (1.0 - self.alpha) * ce

        self.losses["kd"] += kd
        self.losses["ce"] += ce.detach()
        self._loss_steps += 1

        inputs["labels"] = labels
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: Dict[str, float], start_time: Optional[float] = None) -> None:
        if self._loss_steps > 0 and "loss" in logs:
            for name, total in self.losses.items():
                logs[f"{name}_loss"] = round(float(total / self._loss_steps), 4)
            self.losses = {"kd": 0.0, "ce": 0.0}
            self._loss_steps = 0
        super().log(logs, start_time)

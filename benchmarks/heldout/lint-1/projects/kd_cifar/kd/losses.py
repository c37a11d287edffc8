import torch.nn as nn
import torch.nn.functional as F


class KDLoss(nn.Module):
    def __init__(self, temperature=4.0):
        super().__init__()
        self.t = temperature

    def forward(self, student_logits, teacher_logits):
        t = self.t
        return F.kl_div(F.log_softmax(student_logits / t, 1), F.log_softmax(teacher_logits / t, 1),
                        reduction="batchmean", log_target=True) * t * t

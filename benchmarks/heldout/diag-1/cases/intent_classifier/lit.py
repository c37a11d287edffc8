"""Just enough of a Lightning-like API for our experiments."""
import time

import torch


class LitModule(torch.nn.Module):
    def training_step(self, batch, batch_idx):
        raise NotImplementedError

    def configure_optimizers(self):
        raise NotImplementedError

    def log(self, name, value, prog_bar=False):
        self._logged[name] = value

    def transfer_batch_to_device(self, batch, device):
        return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


class Trainer:
    def __init__(self, max_steps, log_every_n_steps=50, precision="bf16-mixed"):
        self.max_steps = max_steps
        self.log_every_n_steps = log_every_n_steps
        self.precision = precision
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.global_step = 0

    def fit(self, module, train_dataloader):
        module.to(self.device)
        module._logged = {}
        optimizer = module.configure_optimizers()
        amp = self.precision == "bf16-mixed" and self.device == "cuda"
        module.train()
        t0 = time.perf_counter()
        while self.global_step < self.max_steps:
            for batch_idx, batch in enumerate(train_dataloader):
                batch = module.transfer_batch_to_device(batch, self.device)
                with torch.autocast(self.device, dtype=torch.bfloat16, enabled=amp):
                    loss = module.training_step(batch, batch_idx)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                self.global_step += 1
                if self.global_step % self.log_every_n_steps == 0:
                    vals = {k: (v.item() if torch.is_tensor(v) else v) for k, v in module._logged.items()}
                    print(f"step {self.global_step} {vals} ({time.perf_counter() - t0:.1f}s)", flush=True)
                if self.global_step >= self.max_steps:
                    return

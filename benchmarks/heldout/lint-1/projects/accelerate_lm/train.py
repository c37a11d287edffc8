import argparse
import math
import os

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

from data import build_dataloaders

logger = get_logger(__name__)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model_name", default="gpt2")
    p.add_argument("--dataset_name", default="wikitext")
    p.add_argument("--dataset_config", default="wikitext-103-raw-v1")
    p.add_argument("--block_size", type=int, default=1024)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--grad_accum", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--preprocess_workers", type=int, default=8)
    p.add_argument("--output_dir", default="out/gpt2-wt103")
    return p.parse_args()


def evaluate(model, eval_dl, accelerator):
    model.eval()
    losses = []
    for batch in eval_dl:
        with torch.no_grad():
            out = model(**batch)
        bs = batch["input_ids"].shape[0]
        losses.append(accelerator.gather_for_metrics(out.loss.repeat(bs)))
    model.train()
    loss = torch.cat(losses).mean()
    return loss.item(), math.exp(min(loss.item(), 20))


def main():
    cfg = parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=cfg.grad_accum, mixed_precision="bf16")
    tokenizer = AutoTokenizer.from_pretrained(cfg.model_name)
    model = AutoModelForCausalLM.from_pretrained(cfg.model_name)
    train_dl, eval_dl = build_dataloaders(tokenizer, cfg)

    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    total_steps = math.ceil(len(train_dl) / cfg.grad_accum) * cfg.epochs
    scheduler = get_cosine_schedule_with_warmup(optimizer, 500, total_steps)

    model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, scheduler
    )

    progress = tqdm(range(total_steps), disable=not accelerator.is_local_main_process)
    model.train()
    for epoch in range(cfg.epochs):
        for step, batch in enumerate(train_dl):
            with accelerator.accumulate(model):
                out = model(**batch)
                loss = out.loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                progress.update(1)
            progress.set_postfix(loss=loss.item(), lr=scheduler.get_last_lr()[0])

        val_loss, ppl = evaluate(model, eval_dl, accelerator)
        logger.info(f"epoch {epoch}: val_loss={val_loss:.4f} ppl={ppl:.2f}")

        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            os.makedirs(cfg.output_dir, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(cfg.output_dir, f"model_epoch{epoch}.bin"))
            tokenizer.save_pretrained(cfg.output_dir)


if __name__ == "__main__":
    main()

import argparse
import logging
import os

import torch
from datasets import load_dataset
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding
from transformers import get_linear_schedule_with_warmup

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("ft")


def get_loaders(tok, args):
    ds = load_dataset("imdb")
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=args.max_len), batched=True,
                remove_columns=["text"]).rename_column("label", "labels")
    coll = DataCollatorWithPadding(tok, pad_to_multiple_of=8)
    train = DataLoader(ds["train"], batch_size=args.bs, shuffle=True, collate_fn=coll,
                       num_workers=4, pin_memory=True)
    test = DataLoader(ds["test"], batch_size=args.bs * 2, collate_fn=coll, num_workers=4, pin_memory=True)
    return train, test


def evaluate(model, loader, device):
    model.eval()
    correct = torch.zeros((), device=device, dtype=torch.long)
    n = 0
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            logits = model(**batch).logits
            correct += (logits.argmax(-1) == batch["labels"]).sum()
            n += batch["labels"].numel()
    model.train()
    return correct.item() / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="bert-base-uncased")
    p.add_argument("--init-ckpt", default=None, help="domain-adapted MLM checkpoint")
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--log-steps", type=int, default=100)
    p.add_argument("--out", default="out/bert-imdb")
    args = p.parse_args()

    device = torch.device("cuda")
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    if args.init_ckpt:
        state = torch.load(args.init_ckpt, map_location="cpu")
        missing, unexpected = model.load_state_dict(state, strict=False)
        log.info("loaded %s (missing %d, unexpected %d)", args.init_ckpt, len(missing), len(unexpected))
    model.to(device)

    train_loader, test_loader = get_loaders(tok, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    total = len(train_loader) * args.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(0.06 * total), total)

    model.train()
    step = 0
    for epoch in range(args.epochs):
        for batch in train_loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % args.log_steps == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
        log.info("epoch %d test acc %.4f", epoch, evaluate(model, test_loader, device))

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)


if __name__ == "__main__":
    main()

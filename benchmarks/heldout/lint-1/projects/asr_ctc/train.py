import argparse
import logging

import torch
import torch.nn as nn

from data import VOCAB, build_loader

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("asr")


class ConvBiLSTM(nn.Module):
    def __init__(self, n_mels=80, hidden=512, n_vocab=len(VOCAB)):
        super().__init__()
        self.frontend = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=(2, 2), padding=1), nn.BatchNorm2d(32), nn.GELU(),
            nn.Conv2d(32, 32, 3, stride=(2, 1), padding=1), nn.BatchNorm2d(32), nn.GELU(),
        )
        self.rnn = nn.LSTM(32 * (n_mels // 2), hidden, num_layers=4, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, n_vocab)

    def forward(self, feats):
        x = self.frontend(feats.unsqueeze(1))
        b, c, t, f = x.shape
        x = x.permute(0, 2, 1, 3).reshape(b, t, c * f)
        x, _ = self.rnn(x)
        return self.out(x).log_softmax(-1)


def train_step(model, batch, optimizer, scaler, ctc, device, max_norm):
    feats, feat_lens, texts, text_lens = batch
    feats = feats.to(device, non_blocking=True)
    texts = texts.to(device, non_blocking=True)
    with torch.autocast("cuda", dtype=torch.float16):
        log_probs = model(feats)
    out_lens = torch.div(feat_lens - 1, 4, rounding_mode="floor") + 1
    loss = ctc(log_probs.float().transpose(0, 1), texts, out_lens, text_lens)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    torch.cuda.empty_cache()
    return loss.detach(), gnorm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", default="manifests/train-960.tsv")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-norm", type=float, default=5.0)
    args = p.parse_args()

    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    model = ConvBiLSTM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler("cuda")
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    loader = build_loader(args.train, args.bs, args.workers)

    for epoch in range(args.epochs):
        model.train()
        loss_sum = torch.zeros((), device=device)
        for step, batch in enumerate(loader):
            loss, gnorm = train_step(model, batch, optimizer, scaler, ctc, device, args.max_norm)
            loss_sum += loss
            if step % 200 == 0:
                log.info("epoch %d step %d loss %.3f gnorm %.2f", epoch, step, loss.item(), gnorm.item())
        log.info("epoch %d mean loss %.4f", epoch, (loss_sum / (step + 1)).item())
        torch.save({"model": model.state_dict(), "epoch": epoch}, f"asr_e{epoch}.pt")


if __name__ == "__main__":
    main()

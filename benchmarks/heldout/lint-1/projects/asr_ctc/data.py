import csv

import torch
import torchaudio
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

VOCAB = ["<blank>", " ", "'"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
CHAR2ID = {c: i for i, c in enumerate(VOCAB)}


class LibriManifest(Dataset):
    def __init__(self, manifest, sample_rate=16000, n_mels=80):
        with open(manifest) as f:
            self.rows = [r for r in csv.DictReader(f, delimiter="\t")]
        self.sr = sample_rate
        self.mel = torchaudio.transforms.MelSpectrogram(sample_rate, n_fft=400, hop_length=160, n_mels=n_mels)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        wav, sr = torchaudio.load(row["path"])
        if sr != self.sr:
            wav = torchaudio.functional.resample(wav, sr, self.sr)
        feats = (self.mel(wav).squeeze(0) + 1e-6).log().transpose(0, 1)
        feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-5)
        text = torch.tensor([CHAR2ID[c] for c in row["text"].lower() if c in CHAR2ID])
        return feats, text


def collate(batch):
    feats, texts = zip(*batch)
    feat_lens = torch.tensor([f.size(0) for f in feats])
    text_lens = torch.tensor([t.size(0) for t in texts])
    return pad_sequence(feats, batch_first=True), feat_lens, pad_sequence(texts, batch_first=True), text_lens


def build_loader(manifest, batch_size, workers, shuffle=True):
    return DataLoader(LibriManifest(manifest), batch_size=batch_size, shuffle=shuffle,
                      collate_fn=collate, num_workers=workers, pin_memory=True,
                      persistent_workers=workers > 0)

import torch
from torch import nn
import torch.nn.functional as F


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x, key_padding):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=key_padding)
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(B, T, D)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class BertForMaskedLM(nn.Module):
    def __init__(self, vocab_size=30522, hidden=768, layers=6, heads=12, ff=3072, max_pos=512):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden)
        self.embed_positions = nn.Embedding(max_pos, hidden)
        self.embed_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, ff) for _ in range(layers)])
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden))
        self.decoder_bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.embed_tokens.weight, std=0.02)
        nn.init.normal_(self.embed_positions.weight, std=0.02)

    def forward(self, input_ids, attention_mask, labels=None):
        T = input_ids.shape[1]
        x = self.embed_norm(self.embed_tokens(input_ids) + self.embed_positions.weight[:T])
        pad = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, pad)
        logits = F.linear(self.transform(x), self.embed_tokens.weight, self.decoder_bias)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return out

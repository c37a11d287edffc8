"""Synthetic data of the same shapes for the corpus scripts that would download theirs.

Writes into a corpus work tree (the copy ``run_corpus.py`` and ``ab.py`` make of ``.corpus``):

* ``pytorch-examples/data/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``: the files
  torchvision's ``MNIST`` looks for before it downloads (``_check_exists``: they exist), in the
  idx format (magic 2051/2049, big-endian sizes), 60,000 + 10,000 images of 28x28 (random
  strokes on black, random labels);
* ``pytorch-examples/super_resolution/dataset/BSDS300/images/{train,test}/*.jpg``: 200 + 100
  JPEGs of 481x321 (BSDS300's sizes; ``download_bsd300`` skips the download when the folder exists);
* ``pytorch-examples/word_language_model/data/wikitext-2/{train,valid,test}.txt``: about 1 M,
  100 k and 100 k tokens over a 33,278-word vocabulary (wikitext-2's vocabulary size), Zipf-like;
* ``minGPT/projects/chargpt/input.txt``: 1.1 MB of text over 65 characters (tiny-shakespeare's size).

``--scale`` shrinks every count for the CPU check. Deterministic (fixed seeds).

    python3 benchmarks/corpus/make_data.py WORK_TREE [--scale 0.1]
"""

from __future__ import annotations

import argparse
import random
import string
import struct
import sys
import time
from pathlib import Path

import numpy as np

WIKITEXT_VOCAB = 33278


def _idx_images(path: Path, images: np.ndarray) -> None:
    n, rows, cols = images.shape
    path.write_bytes(struct.pack(">IIII", 2051, n, rows, cols) + images.astype(np.uint8).tobytes())


def _idx_labels(path: Path, labels: np.ndarray) -> None:
    path.write_bytes(struct.pack(">II", 2049, len(labels)) + labels.astype(np.uint8).tobytes())


def mnist(root: Path, train: int, test: int) -> None:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", train), ("t10k", test)):
        images = np.zeros((n, 28, 28), dtype=np.uint8)
        # a few bright strokes per image, so the pixels are not all noise or all zero
        for _ in range(4):
            r = rng.integers(4, 24, size=n)
            c0 = rng.integers(4, 20, size=n)
            for k in range(6):
                images[np.arange(n), r, c0 + k] = 255
        images |= (rng.random((n, 28, 28)) < 0.02).astype(np.uint8) * 128
        _idx_images(raw / f"{split}-images-idx3-ubyte", images)
        _idx_labels(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, size=n))


def bsds300(folder: Path, train: int, test: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    for split, n in (("train", train), ("test", test)):
        out = folder / "BSDS300" / "images" / split
        out.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            w, h = (481, 321) if i % 3 else (321, 481)  # BSDS300 has both orientations
            base = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
            img = Image.fromarray(base).resize((w, h), Image.BILINEAR)
            img.save(out / f"{100000 + i}.jpg", quality=90)


def _zipf_words(rng: random.Random, vocab: list[str], n: int) -> list[str]:
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    return rng.choices(vocab, weights=weights, k=n)


def wikitext(folder: Path, train_tokens: int, other_tokens: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2)
    letters = string.ascii_lowercase
    vocab = sorted({"".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(WIKITEXT_VOCAB * 2)})
    vocab = vocab[:WIKITEXT_VOCAB - 1]  # + "<eos>" that the script adds per line
    rng.shuffle(vocab)
    for name, n in (("train", train_tokens), ("valid", other_tokens), ("test", other_tokens)):
        words = _zipf_words(rng, vocab, n)
        lines, i = [], 0
        while i < len(words):
            k = rng.randint(5, 120)  # wikitext-2 lines: a heading or a paragraph
            lines.append(" " + " ".join(words[i:i + k]) + " ")
            i += k
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf8")


def char_text(path: Path, chars: int) -> None:
    rng = random.Random(3)
    alphabet = string.ascii_letters + " \n!$&',-.3:;?"  # 65 characters, as in tiny shakespeare
    words = ["".join(rng.choices(string.ascii_letters, k=rng.randint(1, 8))) for _ in range(3000)]
    parts, size = [], 0
    while size < chars:
        w = rng.choice(words) + rng.choice(" " * 12 + "\n,.;:!?'-&$3")
        parts.append(w)
        size += len(w)
    text = "".join(parts)[:chars]
    # make sure every character of the alphabet occurs (vocabulary size 65)
    text = alphabet + text[len(alphabet):]
    path.write_text(text, encoding="utf8")


def make_all(work: Path, scale: float = 1.0) -> dict[str, float]:
    """Write every data set under ``work``; return seconds spent on each."""
    def n(count: int, least: int) -> int:
        return max(least, int(count * scale))

    times: dict[str, float] = {}
    ex = work / "pytorch-examples"
    for name, fn in (
        ("mnist", lambda: mnist(ex / "data", n(60000, 2000), n(10000, 500))),
        ("bsds300", lambda: bsds300(ex / "super_resolution" / "dataset", n(200, 40), n(100, 10))),
        ("wikitext-2", lambda: wikitext(ex / "word_language_model" / "data" / "wikitext-2",
                                        n(1_000_000, 30_000), n(100_000, 5_000))),
        ("chargpt input.txt", lambda: char_text(work / "minGPT" / "projects" / "chargpt" / "input.txt",
                                                n(1_115_394, 50_000))),
    ):
        t0 = time.perf_counter()
        fn()
        times[name] = round(time.perf_counter() - t0, 2)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="the corpus work tree (holds pytorch-examples/, minGPT/)")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every count (CPU check: 0.1)")
    args = parser.parse_args()
    for repo in ("pytorch-examples", "minGPT"):
        if not (args.work / repo).is_dir():
            print(f"{args.work / repo}: missing; run benchmarks/corpus/prepare.sh and copy .corpus first",
                  file=sys.stderr)
            return 2
    for name, seconds in make_all(args.work, args.scale).items():
        print(f"{name}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The public scripts ``run_wild.py`` runs on the CPU: where each comes from, how it is run, the
data it is given (written locally, no downloads), and the loop shape it samples.

Mirrors are the fetch tool's bare git directories (``.mirror/<owner>+<name>/repo`` in the first
folder above this checkout that has one, as ``fix_wild.py`` finds them); the commit is pinned so the
table can be re-run on the same code.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MIRRORS = next((p / ".mirror" for p in REPO.parents if (p / ".mirror").is_dir()), REPO.parent / ".mirror")
TVLIB = "/tmp/tvlib"  # torchvision for this torch, CPU
EXAMPLES = ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8")
NANOGPT = ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291")
MINGPT = ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26")
MAKEMORE = ("karpathy/makemore", "988aa59e4d8fefa526d06f3b453ad116258398d4")
YUNJEY = ("yunjey/pytorch-tutorial", "0500d3df5a2a8080ccfccbc00aca0eacc21818db")


def mnist(root: Path, train: int = 1200, test: int = 200) -> None:
    """The four raw idx files torchvision's MNIST checks before it would download."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", train), ("t10k", test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


def shakespeare_char(folder: Path, n: int = 60_000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    chars = [chr(c) for c in range(32, 97)]
    rng = np.random.default_rng(0)
    rng.integers(0, 65, size=n, dtype=np.uint16).tofile(folder / "train.bin")
    rng.integers(0, 65, size=n // 10, dtype=np.uint16).tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65, "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)


def wikitext(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(500)]
    for name, n in (("train", 12_000), ("valid", 2_000), ("test", 2_000)):
        ids = rng.zipf(1.3, size=n) % len(words)
        lines = [" ".join(words[i] for i in ids[k:k + 20]) for k in range(0, n, 20)]
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n")


def sine_wave(cwd: Path) -> None:
    """generate_sine_wave.py's recipe, saved as it does, smaller (13 x 200, not 100 x 1000): an
    LBFGS step over the full set takes over a minute on this CPU."""
    import torch

    np.random.seed(2)
    x = np.empty((13, 200), "int64")
    x[:] = np.array(range(200)) + np.random.randint(-80, 80, 13).reshape(13, 1)
    torch.save(np.sin(x / 1.0 / 20).astype("float64"), open(cwd / "traindata.pt", "wb"))


def matplotlib_shim(cwd: Path) -> None:
    """time_sequence_prediction imports matplotlib only to draw; this environment lacks it."""
    shim = cwd / "_shim" / "matplotlib"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text("def use(*a, **k):\n    pass\n")
    (shim / "pyplot.py").write_text("def __getattr__(name):\n    return lambda *a, **k: None\n")


@dataclass(frozen=True)
class WildScript:
    name: str
    repo: str
    commit: str
    paths: tuple[str, ...]
    cwd: str
    cmd: tuple[str, ...]  # PYTHON stands for this interpreter
    shape: str  # the loop shape it samples
    data: Callable[[Path], None] | None = None
    pythonpath: tuple[str, ...] = ()  # relative to cwd
    extra_paths: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    steps: int | None = None  # also run --steps N (must stop at exactly N)
    timeout_s: float = 180.0

    def prepare(self, cwd: Path) -> None:
        if self.data is not None:
            self.data(cwd)


SCRIPTS: tuple[WildScript, ...] = (
    WildScript("ex_mnist", *EXAMPLES, ("mnist",), "mnist",
               ("PYTHON", "main.py", "--epochs", "2", "--log-interval", "5"),
               "DataLoader, Adadelta + StepLR scheduler, 2 epochs with a test pass each",
               data=lambda cwd: mnist(cwd.parent / "data"), extra_paths=(TVLIB,), steps=12),
    WildScript("ex_mnist_hogwild", *EXAMPLES, ("mnist_hogwild",), "mnist_hogwild",
               ("PYTHON", "main.py", "--epochs", "1", "--num-processes", "2", "--log-interval", "5"),
               "torch.multiprocessing.Process (spawn) x2 training a shared model, parent tests",
               data=lambda cwd: mnist(cwd.parent / "data"), extra_paths=(TVLIB,)),
    WildScript("ex_dcgan", *EXAMPLES, ("dcgan",), "dcgan",
               ("PYTHON", "main.py", "--dataset", "fake", "--niter", "1", "--batchSize", "16",
                "--ngf", "8", "--ndf", "8", "--workers", "2", "--outf", "out", "--manualSeed", "1"),
               "GAN: two optimizers per iteration, DataLoader num_workers=2 (fork)",
               extra_paths=(TVLIB,), steps=20),
    WildScript("ex_time_sequence", *EXAMPLES, ("time_sequence_prediction",), "time_sequence_prediction",
               ("PYTHON", "train.py", "--steps", "1"),
               "LBFGS with a closure (many backward per step), no DataLoader",
               data=lambda cwd: (sine_wave(cwd), matplotlib_shim(cwd)), pythonpath=("_shim",),
               env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
    WildScript("ex_ddp_torchrun_exit", *EXAMPLES, ("distributed/ddp",), "distributed/ddp",
               ("PYTHON", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "example.py"),
               "torchrun x2; the script sys.exit()s (no GPUs) before any step"),
    WildScript("ex_word_lm", *EXAMPLES, tuple(f"word_language_model/{f}.py" for f in ("main", "data", "model")), "word_language_model",
               ("PYTHON", "main.py", "--use-optimizer", "--lr", "0.001", "--epochs", "1",
                "--emsize", "32", "--nhid", "32", "--log-interval", "20", "--save", "model.pt"),
               "custom loop without DataLoader (get_batch on a tensor), clip_grad_norm_",
               data=lambda cwd: wikitext(cwd / "data" / "wikitext-2"), steps=12),
    WildScript("ex_forward_forward", *EXAMPLES, ("mnist_forward_forward",), "mnist_forward_forward",
               ("PYTHON", "main.py", "--epochs", "40", "--train_size", "1000", "--test_size", "200"),
               "one optimizer per layer, layer after layer (the first optimizer stops stepping)",
               data=lambda cwd: mnist(cwd.parent / "data"), extra_paths=(TVLIB,)),
    WildScript("nanogpt_accum", *NANOGPT, ("train.py", "model.py", "configurator.py", "config"), ".",
               ("PYTHON", "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
                "--eval_iters=2", "--eval_interval=10", "--log_interval=1", "--block_size=32",
                "--batch_size=4", "--n_layer=2", "--n_head=2", "--n_embd=32", "--max_iters=30",
                "--lr_decay_iters=30", "--dropout=0.0", "--gradient_accumulation_steps=4"),
               "get_batch from np.memmap, gradient accumulation x4, disabled GradScaler, exec config",
               data=lambda cwd: shakespeare_char(cwd / "data" / "shakespeare_char"), steps=12),
    WildScript("nanogpt_compile", *NANOGPT, ("train.py", "model.py", "configurator.py", "config"), ".",
               ("PYTHON", "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=True",
                "--eval_iters=1", "--eval_interval=1000", "--log_interval=1", "--block_size=16",
                "--batch_size=2", "--n_layer=1", "--n_head=2", "--n_embd=16", "--max_iters=20",
                "--lr_decay_iters=20", "--dropout=0.0"),
               "torch.compile'd model on the CPU (inductor), get_batch",
               data=lambda cwd: shakespeare_char(cwd / "data" / "shakespeare_char"), timeout_s=400),
    WildScript("mingpt_adder_m", *MINGPT, ("mingpt", "projects/adder"), ".",
               ("PYTHON", "-m", "projects.adder.adder", "--trainer.max_iters=40", "--trainer.device=cpu",
                "--trainer.num_workers=2"),
               "python -m pkg.module entry, Trainer with callbacks, DataLoader workers=2 (fork)",
               pythonpath=(".",), steps=12),
    WildScript("makemore", *MAKEMORE, ("makemore.py", "names.txt"), ".",
               ("PYTHON", "makemore.py", "-i", "names.txt", "-o", "out", "--max-steps", "40",
                "--num-workers", "2", "--n-layer", "2", "--n-embd", "32", "--n-embd2", "32"),
               "InfiniteDataLoader (a generator over a re-made iterator), workers=2, eval + sampling",
               steps=12),
    WildScript("yunjey_gan", *YUNJEY, ("tutorials/03-advanced/generative_adversarial_network",),
               "tutorials/03-advanced/generative_adversarial_network", ("PYTHON", "main.py"),
               "GAN, D then G optimizer each iteration, 200 epochs of a tiny MNIST",
               data=lambda cwd: mnist(cwd.parent.parent / "data", train=300, test=100),
               extra_paths=(TVLIB,), steps=20),
)

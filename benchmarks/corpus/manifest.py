"""The corpus: public training scripts nobody here wrote, and how each one is run unmodified.

Each :class:`Script` names a file of a public repository copied by ``prepare.sh`` into the
carried folder (``.corpus/<repo>/...``), the folder it runs from, its arguments on one GPU and
tiny arguments for the CPU check of the harness, the synthetic data ``make_data.py`` gives it
(where the script would download data), and the hand fixes ``fixes.py`` can apply to a copy.

Arguments were chosen so that each script runs well past ``gpudoctor run --steps 60`` (60
optimizer steps, warm-up included) and, where its arguments allow, stops by itself after one
epoch or 1,000 iterations otherwise (ImageNet's ``--dummy`` epoch is 5,005 steps: the
per-script timeout stops it); where a flag was needed to train on the GPU at all, or to take
the optimizer path, ``why`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Script:
    name: str
    repo: str  # folder under the corpus root: "pytorch-examples" or "minGPT"
    unit: str  # folder (relative to the repo root) copied into a variant; "." = the whole repo
    cwd: str  # the folder the script runs from, relative to the repo root
    script: str  # the file to run, relative to cwd
    args: tuple[str, ...]  # one GPU
    cpu_args: tuple[str, ...]  # tiny settings for the CPU check of the harness
    source: str  # key of the patches in fixes.py (two entries can share one file)
    fixes: tuple[str, ...]  # fix kinds fixes.py implements for this script
    shared: tuple[str, ...] = ()  # repo-relative paths symlinked (not copied) into a variant
    repo_on_path: bool = False  # the script imports its repo's package (PYTHONPATH=repo root)
    cpu_ok: bool = True  # False: hard-codes cuda:0, no CPU fallback (not run in the CPU check)
    timeout_s: float = 150.0
    why: str = ""


EXAMPLES = "pytorch-examples"
MINGPT = "minGPT"

SCRIPTS: tuple[Script, ...] = (
    Script(
        name="imagenet_resnet50", repo=EXAMPLES, unit="imagenet", cwd="imagenet", script="main.py",
        args=("-a", "resnet50", "--dummy", "--epochs", "1"),
        cpu_args=("-a", "resnet18", "-b", "4", "-j", "0", "--dummy", "-p", "2"),
        source="imagenet", fixes=("bf16", "loader", "nosync", "channels_last"),
        why="torchvision FakeData (--dummy), batch 256, 4 workers, one epoch of 5,005 steps (its shortest run: the timeout stops it)",
    ),
    Script(
        name="imagenet_resnet18", repo=EXAMPLES, unit="imagenet", cwd="imagenet", script="main.py",
        args=("-a", "resnet18", "-b", "256", "-j", "4", "--dummy", "--epochs", "1"),
        cpu_args=("-a", "resnet18", "-b", "4", "-j", "0", "--dummy", "-p", "2"),
        source="imagenet", fixes=("bf16", "loader", "nosync", "channels_last"),
        why="as above with ResNet-18",
    ),
    Script(
        name="dcgan", repo=EXAMPLES, unit="dcgan", cwd="dcgan", script="main.py",
        args=("--dataset", "fake", "--accel", "--outf", "out"),
        cpu_args=("--dataset", "fake", "--batchSize", "8", "--workers", "0", "--ngf", "16",
                  "--ndf", "16", "--outf", "out"),
        source="dcgan", fixes=("loader", "nosync", "batch", "bf16", "persistent", "epochwork", "epochboundary"),
        why="FakeData 64x64 (1,000 images: 16 steps an epoch, 25 epochs); --accel selects the GPU",
    ),
    Script(
        name="mnist", repo=EXAMPLES, unit="mnist", cwd="mnist", script="main.py",
        args=("--epochs", "1"), cpu_args=("--batch-size", "16", "--log-interval", "4"),
        source="mnist", fixes=("loader", "batch", "bf16", "compile", "nonblocking"),
        shared=("data",),
        why="MNIST from ../data (synthetic idx files), 938 steps an epoch",
    ),
    Script(
        name="siamese_network", repo=EXAMPLES, unit="siamese_network", cwd="siamese_network",
        script="main.py", args=("--epochs", "1"), cpu_args=("--batch-size", "8", "--log-interval", "4"),
        source="siamese", fixes=("loader", "batch", "bf16", "nonblocking"), shared=("data",),
        why="MNIST pairs from ../data, ResNet-18 trunk, 938 steps an epoch",
    ),
    Script(
        name="mnist_rnn", repo=EXAMPLES, unit="mnist_rnn", cwd="mnist_rnn", script="main.py",
        args=("--accel", "--epochs", "1"), cpu_args=("--batch-size", "16", "--log-interval", "4"),
        source="mnist_rnn", fixes=("loader", "batch", "bf16", "nonblocking"), shared=("data",),
        why="MNIST rows through an LSTM; --accel selects the GPU (no CPU fallback with it)",
    ),
    Script(
        name="super_resolution", repo=EXAMPLES, unit="super_resolution", cwd="super_resolution",
        script="main.py", args=("--upscale_factor", "3", "--accel", "--nEpochs", "40"),
        cpu_args=("--upscale_factor", "3", "--batchSize", "8", "--nEpochs", "2", "--threads", "0"),
        source="super_resolution", fixes=("loader", "nosync", "bf16"),
        shared=("super_resolution/dataset",),
        why="BSDS300-like JPEG folders (200 train, 100 test, 481x321): 4 steps an epoch, each "
            "epoch ends with a test pass and a checkpoint; 40 epochs = 160 steps",
    ),
    Script(
        name="ddp_series_single_gpu", repo=EXAMPLES, unit="distributed/ddp-tutorial-series",
        cwd="distributed/ddp-tutorial-series", script="single_gpu.py",
        args=("10", "1000"), cpu_args=("3", "1000"),
        source="ddp_single_gpu", fixes=("batch", "loader", "compile", "nonblocking"),
        cpu_ok=False,
        why="Linear(20, 1) on 2,048 random samples, batch 32: 64 steps an epoch, 10 epochs; "
            "device 0 is hard-coded (no CPU fallback)",
    ),
    Script(
        name="mingpt_adder", repo=MINGPT, unit=".", cwd="projects/adder", script="adder.py",
        args=("--trainer.max_iters=1000",), cpu_args=("--trainer.batch_size=16", "--trainer.num_workers=0"),
        source="mingpt", fixes=("batch", "loader", "bf16", "compile", "nonblocking"),
        repo_on_path=True,
        why="gpt-nano on generated 2-digit additions, batch 64, 4 workers, 1,000 iterations",
    ),
    Script(
        name="mingpt_chargpt", repo=MINGPT, unit=".", cwd="projects/chargpt", script="chargpt.py",
        args=("--trainer.max_iters=1000",), cpu_args=("--model.model_type=gpt-nano", "--data.block_size=32",
                           "--trainer.batch_size=8", "--trainer.num_workers=0"),
        source="mingpt", fixes=("batch", "loader", "bf16", "compile", "nonblocking"),
        repo_on_path=True,
        why="gpt-mini, block 128, batch 64 on a synthetic 1.1 MB input.txt, 1,000 iterations",
    ),
    Script(
        name="word_language_model", repo=EXAMPLES, unit="word_language_model",
        cwd="word_language_model", script="main.py",
        args=("--accel", "--use-optimizer", "--lr", "0.001", "--epochs", "1"),
        cpu_args=("--use-optimizer", "--lr", "0.001", "--emsize", "32", "--nhid", "32",
                  "--bptt", "16", "--batch_size", "8", "--epochs", "1"),
        source="word_lm", fixes=("nosync", "batch", "bf16"),
        shared=("word_language_model/data",),
        why="2-layer LSTM on a synthetic wikitext-2-sized corpus (33,278 words, 1 M tokens); "
            "--use-optimizer takes the optimizer path (without it the script updates p.data by "
            "hand and there is no optimizer step to count) with AdamW at --lr 0.001 (the default "
            "lr 20 is meant for its hand-written SGD)",
    ),
    Script(
        name="vae", repo=EXAMPLES, unit="vae", cwd="vae", script="main.py",
        args=("--epochs", "1"), cpu_args=("--batch-size", "16", "--log-interval", "4"),
        source="vae", fixes=("loader", "nosync", "batch"), shared=("data",),
        why="MNIST from ../data, MLP VAE, batch 128, 469 steps an epoch",
    ),
)

BY_NAME = {s.name: s for s in SCRIPTS}


def select(only: str) -> list[Script]:
    """The scripts named in ``only`` (comma-separated), or all of them; unknown names are refused."""
    names = [n for n in only.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown corpus script(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names] if names else list(SCRIPTS)

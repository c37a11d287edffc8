"""``gpudoctor fix`` on public training scripts outside the corpus ("wild"), on the CPU: no GPU.

For each script (a file of a fetched mirror, extracted with ``git archive`` into WORK; never
committed):

1. **plan**: what ``fix`` would change if every finding with a code form were a WARN on an H200
   (``GD-RUN-DATALOADER``, ``-FP32-COMPUTE``, ``-CHANNELS-LAST``, ``-LAUNCH-BOUND``, ``-HOST-SYNC``,
   ``-NO-SET-EPOCH``, ``-H2D-PAGEABLE``, and ``-PERIODIC-STALL`` with restarted workers), through
   the calls ``fix`` makes after its run (``locate_project``, ``plan_fix``, ``patch_all``): every
   rule's location exercised, each patched file parsed; the diff goes to OUT/<name>.diff (it
   quotes the public script: not committed) and is judged by reading;
2. **cli** (scripts runnable here, synthetic data): ``gpudoctor fix --no-measure --steps 3
   --no-profile --json`` itself, with the findings of its own CPU run;
3. **runs**: the same plan made for the CPU (autocast on "cpu", no pinning; ``compile`` left out:
   inductor on 2 shared cores takes minutes) run under ``gpudoctor run --steps 3``.

    PYTHONPATH=src:<torchvision dir> python3 benchmarks/corpus/fix_wild.py --out OUT [--set 1|2|3|4|5|6] [--only a,b] [--no-run]

Writes OUT/wild.json, OUT/wild.md (``--set N``, N > 1: wildN.json, wildN.md) and OUT/<name>.diff.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
# the bare mirrors the search tool's fetch makes, in a folder above the checkout
MIRRORS = next((p / ".mirror" for p in REPO.parents if (p / ".mirror").is_dir()), REPO.parent / ".mirror")


@dataclass(frozen=True)
class Wild:
    name: str
    repo: str  # owner/name of the mirror
    path: str  # the script, relative to the repository root
    args: tuple[str, ...] = ()  # tiny CPU arguments (run from the script's folder)
    data: str = ""  # synthetic data maker below; "" = none needed
    run: bool = False  # runnable on this CPU (data made here, no network, no NCCL)
    why_not: str = ""


WILD = (
    Wild("pytorch_cifar", "kuangliu/pytorch-cifar", "main.py", ("--lr", "0.1"), "cifar", True),
    Wild("makemore", "karpathy/makemore", "makemore.py",
         ("-i", "names.txt", "-o", "out", "--max-steps", "6", "--num-workers", "0", "-b", "8",
          "--n-layer", "1", "--n-embd", "16", "--n-embd2", "16"), "", True),
    Wild("nanogpt", "karpathy/nanoGPT", "train.py",
         ("--device=cpu", "--compile=False", "--eval_iters=1", "--max_iters=6", "--log_interval=1",
          "--batch_size=2", "--block_size=16", "--n_layer=1", "--n_head=2", "--n_embd=16", "--dataset=tiny",
          "--gradient_accumulation_steps=2", "--always_save_checkpoint=False"), "nanogpt", True),
    Wild("mnist_hogwild", "pytorch/examples", "mnist_hogwild/main.py",
         ("--num-processes", "1", "--epochs", "1", "--batch-size", "16", "--log-interval", "2"), "mnist", True),
    Wild("fast_neural_style", "pytorch/examples", "fast_neural_style/neural_style/neural_style.py",
         why_not="downloads VGG-16 weights"),
    Wild("gcn", "pytorch/examples", "gcn/main.py", why_not="downloads Cora"),
    Wild("gat", "pytorch/examples", "gat/main.py", why_not="downloads Cora"),
    Wild("ddp_multigpu", "pytorch/examples", "distributed/ddp-tutorial-series/multigpu.py",
         why_not="NCCL, mp.spawn over GPUs"),
    Wild("actor_critic", "pytorch/examples", "reinforcement_learning/actor_critic.py", why_not="needs gym"),
    Wild("language_translation", "pytorch/examples", "language_translation/main.py",
         why_not="needs torchtext, spacy, Multi30k"),
    Wild("snli", "pytorch/examples", "legacy/snli/train.py", why_not="needs torchtext.legacy"),
    Wild("mnist_forward_forward", "pytorch/examples", "mnist_forward_forward/main.py", why_not="no patch"),
    Wild("time_sequence_prediction", "pytorch/examples", "time_sequence_prediction/train.py",
         why_not="no patch"),
    Wild("regression", "pytorch/examples", "regression/main.py", why_not="no patch"),
)


sys.path.insert(0, str(Path(__file__).resolve().parent))
from fix_wild2 import JUDGED2, WILD2  # noqa: E402 - round two's rows, beside this harness
from fix_wild3 import JUDGED3, WILD3  # noqa: E402 - round three's
from fix_wild4 import JUDGED4, WHOLE, WILD4  # noqa: E402 - round four's
from fix_wild5 import JUDGED5, WHOLE5, WILD5, export_notebook  # noqa: E402 - round five's
from fix_wild6 import JUDGED6, WHOLE6, WILD6  # noqa: E402 - round six's

SETS = {"1": WILD, **{n: tuple(Wild(name, repo, path, why_not=why) for name, repo, path, why in rows)
                      for n, rows in (("2", WILD2), ("3", WILD3), ("4", WILD4), ("5", WILD5),
                                                  ("6", WILD6))}}


# each plan's diff (OUT/<name>.diff) read by hand: is every change at the code it is about?
JUDGED = {
    "pytorch_cifar": ("yes", "loader on trainloader (testloader untouched); bf16 over net(inputs)+criterion; "
                      "channels_last since the conv net is built in models/ (was advice: 'no convolution in this "
                      "file'); no compile: nn.DataParallel wraps the net on CUDA (was patched before it); "
                      "cudnn_benchmark only because this plan forces it (the script sets it on CUDA)"),
    "makemore": ("yes", "compile after the if/elif/else-raise chain that picks the model (was advice: assignment "
                 "not found); bf16 over logits, loss = model(X, Y); its InfiniteDataLoader class: loader advice"),
    "nanogpt": ("yes", "no patch is right: autocast already, its own --compile switch (now the advice's reason), "
                "batches from pinned memmaps; the loop found through gradient accumulation and "
                "scaler.step(optimizer) (was: 'does not step an optimizer'); CLI: lint's torch.cuda.amp rewrite"),
    "mnist_hogwild": ("yes", "the loop in train.py's train(), loader via **dataloader_kwargs merged; loader + "
                      "persistent together nest two merges (persistent True: the merged loader's 8 workers, round five; was the "
                      "script's own count); "
                      "trains in an mp.Process child: run records no steps (its log shows the patched copy "
                      "training), so fix stops at 'the run did not train'"),
    "fast_neural_style": ("yes", "bf16 over transformer(x) .. total_loss, the style-loss for loop inside (was "
                          "advice); channels_last: TransformerNet's convs in transformer_net.py; item: agg_*_loss "
                          "read only in '{:.6f}' fields"),
    "gcn": ("yes", "bf16 in train_iter by its parameter name for the model (was advice); full-batch graph: "
            "loader advice right; bf16 over sparse features not run here (measurement drops a crash)"),
    "gat": ("yes", "as gcn: bf16 in train_iter, compile after gat_net = GAT(...).to(device)"),
    "ddp_multigpu": ("yes", "self.model found through self.model.module.state_dict() (was advice): compile after "
                     "the DDP wrap, bf16 in _run_batch; loader in prepare_dataloader (DistributedSampler kept)"),
    "actor_critic": ("yes", "compile after model = Policy(); bf16 advice right (forward in select_action, "
                     "backward in finish_episode)"),
    "language_translation": ("yes", "bf16 over model(...) .. loss (optim.zero_grad() between them ends up "
                             "inside: harmless); loader built in src/data.py: advice (a change spans one file)"),
    "snli": ("yes", "compile after the if/else that assigns model in both arms; bf16 block holds the accuracy "
             "lines (harmless); torchtext iterator: loader advice"),
    "mnist_forward_forward": ("yes", "no patch is right: layer-local losses, no model-wide optimizer"),
    "time_sequence_prediction": ("yes", "no patch: LBFGS closure (backward inside a def), float64 model"),
    "regression": ("yes", "no patch: manual SGD, no optimizer.step()"),
}

# round two, read after this round's rule changes ("was": before them; wild2-cpu-before.md)


def _findings():
    from gpudoctor.records.finding import Finding, Severity

    codes = ("GD-RUN-DATALOADER", "GD-RUN-FP32-COMPUTE", "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND",
             "GD-RUN-HOST-SYNC", "GD-RUN-NO-SET-EPOCH", "GD-RUN-H2D-PAGEABLE")
    out = [Finding(code=c, severity=Severity.WARN, title=c, fix="(its fix)") for c in codes]
    out.append(Finding(code="GD-RUN-PERIODIC-STALL", severity=Severity.WARN, title="stall", fix="(its fix)",
                       data=(("worker_restart", 1.0), ("first_batch_wait_ms", 50.0))))
    return out


def _config(device: str):
    from gpudoctor.records.run import LoaderConfig, RankConfig

    loader = LoaderConfig(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None,
                          batch_size=64, drop_last=False, sampler="RandomSampler", dataset="Dataset")
    return RankConfig(rank=0, local_rank=0, world_size=1, pid=0, device=device,
                      device_name="NVIDIA H200" if device.startswith("cuda") else "", usable_cpus=16,
                      channels_last=False, loaders=(loader,))


def extract(w: Wild, work: Path) -> Path:
    """The mirror's folder of the script (the whole repository for a top-level script) under WORK."""
    git = MIRRORS / w.repo.replace("/", "+") / "repo"
    dest = work / w.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    top = w.path.split("/")[0] if "/" in w.path and w.repo not in WHOLE | WHOLE5 | WHOLE6 else ""
    archive = subprocess.run(["git", "--git-dir", str(git), "archive", "HEAD", *([top] if top else [])],
                             capture_output=True)
    if archive.returncode == 0:
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return export_notebook(dest / w.path)
    # a mirror whose largest files are absent (e.g. a data set kept in the repository): file by file
    names = subprocess.run(["git", "--git-dir", str(git), "ls-tree", "-r", "--name-only", "HEAD",
                            *([top] if top else [])], capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        blob = subprocess.run(["git", "--git-dir", str(git), "show", f"HEAD:{name}"], capture_output=True)
        if blob.returncode == 0:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(blob.stdout)
    return dest / w.path


def commit_of(w: Wild) -> str:
    git = MIRRORS / w.repo.replace("/", "+") / "repo"
    return subprocess.run(["git", "--git-dir", str(git), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def make_data(kind: str, folder: Path) -> None:
    rng = np.random.default_rng(0)
    if kind == "cifar":  # CIFAR-10's python pickles, 256 train and 64 test images
        root = folder / "data" / "cifar-10-batches-py"
        root.mkdir(parents=True, exist_ok=True)
        for name, n in [*((f"data_batch_{i}", 64 if i == 1 else 48) for i in range(1, 6)), ("test_batch", 64)]:
            with open(root / name, "wb") as f:
                pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                             "labels": rng.integers(0, 10, n).tolist()}, f)
        with open(root / "batches.meta", "wb") as f:
            pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
        # torchvision checks the archive's files by md5: the script's download=True then finds them
        # "corrupted" and tries the network; skip that check in the copy's dataset only
        (folder / "sitecustomize.py").write_text(
            "import torchvision.datasets.cifar as c\nc.CIFAR10._check_integrity = lambda self: True\n"
            "c.CIFAR10._load_meta = lambda self: (setattr(self, 'classes', [f'c{i}' for i in range(10)]),"
            " setattr(self, 'class_to_idx', {f'c{i}': i for i in range(10)}))\n")
    elif kind == "nanogpt":  # data/tiny: train.bin, val.bin, meta.pkl (char vocabulary of 32)
        root = folder / "data" / "tiny"
        root.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", 4096), ("val", 1024)):
            rng.integers(0, 32, n, dtype=np.uint16).tofile(root / f"{split}.bin")
        with open(root / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": 32}, f)
    elif kind == "mnist":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_data import mnist

        mnist(folder.parent / "data", 256, 64)


def plan(path: Path, device: str, drop: tuple[str, ...] = ()) -> dict:
    from gpudoctor.cli.fix_flow import patch_all
    from gpudoctor.fix.plan import plan_fix
    from gpudoctor.fix.project import locate_project
    from gpudoctor.fix.view import unified_diff

    source = path.read_text(encoding="utf-8")
    found = locate_project(path, source)
    p = plan_fix(found, _findings(), _config(device))
    changes = [c for c in p.changes if c.kind not in drop]
    sources = {"": source} | ({found.file: Path(found.file).read_text(encoding="utf-8")} if found.file else {})
    fixed, dropped = patch_all(sources, path, changes)
    base = path.parent

    def rel(f: str) -> str:
        return os.path.relpath(f or path, base)

    parses = {}
    for f in sources:
        if fixed[f] != sources[f]:
            try:
                ast.parse(fixed[f])
                parses[rel(f)] = True
            except SyntaxError:
                parses[rel(f)] = False
    return {"changes": [{"kind": c.kind, "code": c.code, "file": rel(c.file),
                         "lines": sorted({o.at[0] for o in c.ops}),
                         "switches": [w for e in c.switches for w in (e.flags[-1] if e.value else e.flags[0], e.value) if w]}
                        for c in changes],
            "dropped": [c.kind for c in dropped], "advice": [f"{a.code} {a.reason}" for a in p.advice],
            "notes": list(found.notes), "parses": parses,
            "diff": "".join(unified_diff(sources[f], fixed[f], rel(f)) for f in sources if fixed[f] != sources[f]),
            "fixed": {rel(f): fixed[f] for f in sources if fixed[f] != sources[f]}}


def _env(folder: Path, pylib: str) -> dict[str, str]:
    env = dict(os.environ)
    # pytorch-cifar's utils.py reads the terminal's size with ``stty size`` at import: no terminal here
    shim = folder / ".bin"
    shim.mkdir(exist_ok=True)
    (shim / "stty").write_text("#!/bin/sh\necho 24 120\n")
    (shim / "stty").chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), str(REPO / "src"), pylib) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cli_fix(path: Path, w: Wild, out: Path, pylib: str) -> dict:
    """``gpudoctor fix --no-measure`` itself on the CPU, from the script's folder."""
    run_dir = out / "fix-run"
    cmd = [sys.executable, "-m", "gpudoctor", "fix", "--no-measure", "--steps", "3", "--no-profile", "--json",
           "--out", str(run_dir), path.name, "--", *w.args]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=path.parent, env=_env(path.parent, pylib), capture_output=True, text=True,
                         timeout=600)
    row = {"rc": res.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        row["error"] = (res.stderr or res.stdout)[-600:]
        return row
    try:
        from gpudoctor.analysis.diagnose import diagnose
        from gpudoctor.records.rundir import load_run

        baseline = load_run(run_dir / "baseline")
        row["findings"] = [f"{f.severity.value} {f.code}" for f in diagnose(baseline)]
        row["steps"] = len(baseline.steps.get(min(baseline.steps), ())) if baseline.steps else 0
    except Exception as exc:  # noqa: BLE001 - the row says what failed
        row["findings"] = [f"unreadable ({exc})"]
    row["changes"] = [c["kind"] for c in doc.get("changes", [])]
    row["advice"] = [f"{a.get('code')} {a.get('reason', '')[:120]}" for a in doc.get("advice", [])]
    return row


def run_patched(path: Path, fixed: dict[str, str], w: Wild, out: Path, pylib: str) -> dict:
    """The CPU plan's patched copy (files replaced in place in WORK), ``gpudoctor run --steps 3``."""
    for rel, text in fixed.items():
        (path.parent / rel).write_text(text, encoding="utf-8")
    run_dir = out / "patched-run"
    cmd = [sys.executable, "-m", "gpudoctor", "run", "--steps", "3", "--no-profile", "--json", "--fail-on", "never",
           "--out", str(run_dir), "--", sys.executable, path.name, *w.args]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=path.parent, env=_env(path.parent, pylib), capture_output=True, text=True,
                         timeout=600)
    row = {"rc": res.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        row["status"] = manifest.get("data", {}).get("status")
        steps = run_dir / "steps-rank0.jsonl"
        row["steps"] = sum(1 for line in steps.open() if '"step"' in line) if steps.exists() else 0  # not the header
    except (OSError, json.JSONDecodeError) as exc:
        row["status"] = f"no manifest ({exc})"
    if row["rc"] != 0 or row.get("status") != "stopped":
        log = run_dir / "stdout.log"
        row["tail"] = (log.read_text()[-800:] if log.exists() else res.stderr[-800:])
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["# gpudoctor fix on public scripts outside the corpus (CPU, no GPU)", "",
             "Plan: every finding with a code form as a WARN on an H200 (see the harness). "
             "CLI: `gpudoctor fix --no-measure --steps 3` on this CPU, its own findings. "
             "Runs: the CPU plan's patched copy (compile left out) under `gpudoctor run --steps 3`.", "",
             "| script | repo@commit | changes planned (file: lines) | advice (not patched) | parses | "
             "CLI on the CPU: exit, changes (findings) | patched copy runs | location right (read) | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["plan"]
        changes = "; ".join(f"{c['kind']} (command line: {' '.join(c['switches'])})" if c.get("switches") else
                            f"{c['kind']} ({c['file']}: {', '.join(map(str, c['lines']))})" for c in p["changes"]) or "-"
        adv = ", ".join(sorted({a.split(":")[0].split(" ", 1)[1] for a in p["advice"]
                                if not a.split(" ", 1)[1].startswith("batch")})) or "-"
        parses = ("yes" if all(p["parses"].values()) else "NO") if p["parses"] else "-"
        cli = r.get("cli")
        cli_s = (f"{cli['rc']}, {', '.join(cli.get('changes', [])) or 'none'} "
                 f"({', '.join(f.split()[1] for f in cli.get('findings', [])) or 'no findings'})" if cli else "-")
        run = r.get("patched")
        run_s = f"{run.get('status')} {run.get('steps', 0)} steps" if run else "-"
        lines.append(f"| {r['name']} | {r['repo']}@{r['commit'][:7]} | {changes} | {adv} | {parses} | {cli_s} | "
                     f"{run_s} | {r.get('judged', '')} | {r.get('note', r.get('why_not', ''))} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-fix-wild"))
    p.add_argument("--only", default="")
    p.add_argument("--no-run", action="store_true")
    p.add_argument("--set", choices=sorted(SETS), default="1", help="1: round one's 14 scripts; 2: round two's 11; 3: round three's 12; 4: round four's 12; 5: round five's 12; 6: round six's 12")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pylib = os.environ.get("PYTHONPATH", "")
    rows = []
    for w in SETS[args.set]:
        if args.only and w.name not in args.only.split(","):
            continue
        path = extract(w, args.work)
        row = {"name": w.name, "repo": w.repo, "commit": commit_of(w), "script": w.path, "args": list(w.args),
               "why_not": w.why_not}
        row["plan"] = plan(path, "cuda:0")
        (args.out / f"{w.name}.diff").write_text(row["plan"]["diff"])
        if w.run and not args.no_run:
            shutil.rmtree(args.work / f"{w.name}-out", ignore_errors=True)
            make_data(w.data, path.parent)
            row["cli"] = cli_fix(path, w, args.work / f"{w.name}-out", pylib)
            cpu = plan(path, "cpu", drop=("compile",))
            row["patched"] = run_patched(path, cpu["fixed"], w, args.work / f"{w.name}-out", pylib) \
                if cpu["fixed"] else None
        row["judged"], row["note"] = {**JUDGED, **JUDGED2, **JUDGED3, **JUDGED4, **JUDGED5, **JUDGED6}.get(w.name, ("not read", ""))
        if w.why_not:
            row["note"] = f"{row['note']}; not run: {w.why_not}".lstrip("; ")
        print(w.name, [c["kind"] for c in row["plan"]["changes"]], row.get("cli"), row.get("patched"), flush=True)
        rows.append(row)
    doc = {"what": "gpudoctor fix on public scripts outside the corpus, CPU", "rows": [
        {**r, "plan": {k: v for k, v in r["plan"].items() if k not in ("diff", "fixed")}} for r in rows]}
    stem = "wild" if args.set == "1" else f"wild{args.set}"
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=2))
    (args.out / f"{stem}.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()

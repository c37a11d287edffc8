"""Generate ``docs/lint.md`` from the rule modules, so the docs cannot drift from the code.

Run ``python -m gpudoctor.lint.docs > docs/lint.md`` after changing a rule; a test checks it.
"""

from __future__ import annotations

from gpudoctor.lint.registry import ALL_RULES, DEFAULT_OFF_PREFIX, GROUPS

INTRO = """\
# `gpudoctor lint`: static checks for GPU-training anti-patterns

`gpudoctor lint PATH...` reads Python files and shell launch scripts (`*.sh`; directories are searched
recursively, skipping hidden, virtual-environment and build directories, and anything that is not a
regular file, such as a FIFO named `x.py`), parses each once with the standard library's `ast`, and
reports the pitfalls that make PyTorch training on NVIDIA GPUs slow, leak memory, produce NaN or hang
under DDP. Every rule knows its scope — which names hold tensors and which hold `nn.Module`s, what a
training step loop is (the loop that calls `.backward()`, `optimizer.step()` or a helper given both a
loss and an optimizer, such as `loss_scaler(loss, optimizer)`), what runs under
autocast or `no_grad`, what a `Dataset.__getitem__` is — and **stays silent when it cannot decide
statically** (a function parameter, a name assigned two different kinds of value, a `**kwargs` call).

Jupyter notebooks (`*.ipynb`) are linted too: their code cells are joined in order and checked as one
script, with IPython lines (`%time`, `!pip`, `x = !ls`) read as `pass` and cells in another language
(`%%bash`, `%%writefile`) skipped. A finding names the cell as a 0-based index into the notebook's
`cells` list (markdown cells count) and the line within that cell: `nb.ipynb:cells[3]:7:5 GD201 ...`,
and JSON output gives it as `"cell": 3` (`null` for plain files). `--fix` leaves notebooks unchanged.

```console
$ gpudoctor lint train.py src/
train.py:12:5 GD101 `x.to()` on a tensor is not in place and its result is discarded: write `x = x.to(...)`
train.py:17:5 GD201 `total += loss` keeps every step's autograd graph alive: add `loss.item()` or `loss.detach()`
Found 2 violations in 14 files. 1 fixable with `gpudoctor lint --fix`.
```

| option | effect |
|---|---|
| `--select GD1,GD302` | run only these codes or prefixes (comma-separated or repeated); `ALL` runs everything |
| `--ignore GD5` | skip these codes or prefixes |
| `--fix` | rewrite the safely fixable violations (marked `[*]` in `--statistics`); needs libcst. Each file is written atomically (a temporary file in the same folder, then a rename), keeping its encoding (PEP 263 cookie, BOM), line endings (CRLF stays CRLF) and permission bits; a file that cannot be written is reported as `E902` and left unchanged while the others are fixed; the summary counts both |
| `--diff` | print what `--fix` would change as a unified diff and write nothing (the report goes to stderr) |
| `--output-format text\\|json\\|sarif\\|github\\|junit` | `path:line:col CODE message` lines, a JSON report, a SARIF 2.1.0 log, GitHub Actions annotations (`::warning file=...`), or JUnit XML (`--format` is an alias) |
| `--json` | same as `--output-format json` |
| `--exit-zero` | exit 0 even when violations are found |
| `-` and `--stdin-filename NAME` | read one file from stdin and report it as `NAME` (which also picks its per-file ignores); with `--fix` the fixed source goes to stdout and the report to stderr |
| `--isolated` | ignore `[tool.gpudoctor.lint]` |
| `--statistics` | one line per code with its count instead of every violation |

**Configuration** (ruff's names), in the nearest `pyproject.toml` at or above the working folder:

```toml
[tool.gpudoctor.lint]
select = ["GD"]                       # default: every rule outside GD9xx
ignore = ["GD104"]
exclude = ["third_party", "*_pb2.py"] # globs relative to this file's folder
per-file-ignores = {"tests/*" = ["GD601"], "bench.py" = ["GD502"]}
target-torch = "2.6"                  # lowest torch the code runs on
```

`--select`/`--ignore` on the command line replace the table's. **Version-aware rules** (GD601
`torch.load` without `weights_only`, GD301 deprecated `torch.cuda.amp`) read the lowest torch the
project declares: `target-torch`, else the nearest `requirements*.txt`, `pyproject.toml`, `setup.py` or
`setup.cfg` naming `torch` at or above the file (stopping at the repository root; a `setup.py` counts
only when it calls setuptools' `setup()`, and its `import torch` lines declare nothing). The installed torch
is not consulted: lint runs in CI and pre-commit, not where the training runs.

**Star imports of the project's own modules** are followed: a file whose only import is
`from utils import *` (or `from .common import *`), where `utils.py` of the same folder or project
root does `import torch` / `import torch.nn as nn`, is checked as torch code, with `__all__` and
`_private` names honoured and up to three chained star imports; a star import of an installed
package brings nothing (lint imports nothing).

**Exit codes** (as ruff's): `0` nothing found, `1` violations found (including a file that does not
parse), `2` usage error (a path that does not exist, an unknown code in `--select`/`--ignore`, an
unknown format).

**Files that do not parse** are reported as `E999 SyntaxError: ...` at the error's position; the other
files are still checked.

**Silencing:** `# noqa` on the reported line (or the last line of a multi-line statement) silences
every rule there; `# noqa: GD101, GD204` silences only those codes.

**Groups:** codes are grouped by hundreds. Rules in the GD9xx range are noisy and off by default: they
run only when selected explicitly (`--select GD9`, `--select GD901` or `--select ALL`; a broad prefix
such as `GD` does not switch them on).

| range | concern |
|---|---|
{groups}

**pre-commit:** add to `.pre-commit-config.yaml`:

```yaml
- repo: <this repository>
  rev: <a tag>
  hooks:
    - id: gpudoctor-lint        # or gpudoctor-lint-fix to apply the safe fixes
```

The hooks run on Python files and shell scripts. `gpudoctor lint` imports neither torch nor numpy nor
NVML (a test runs it with those imports blocked): it needs only the package's light dependencies
(typer, rich) and libcst for `--fix`. Until the package ships torch as an extra, the hook's
environment installs what the package declares; `language: python` with
`additional_dependencies` cannot remove a declared dependency.

Precision on public training code (9 repositories, every finding judged): see
`benchmarks/results/lint_precision.md`. On 13 held-out repositories the rules had not been refined on,
107 of 165 findings were true (precision 0.65, mostly U-Net skip connections taken for kept graphs and
loaders in test modules); after the fixes that run led to, 107 of 108 (0.99): see
`benchmarks/results/lint_precision_heldout.md`. On a second held-out set of 13 repositories neither
round had read, 97 of 121 findings were true (precision 0.80; the timing rule GD501, a module named
`setup.py` read as packaging, and loaders over in-memory data), 104 of 108 (0.96) after its fixes: see
`benchmarks/results/lint_precision_heldout2.md`. On a third held-out set of 11 repositories none of
the 35 earlier ones overlap, 119 of 133 findings were true (precision 0.89; loaders over Datasets that
already return CUDA tensors, resume checkpoints loaded back through a helper, `forward_intermediates`
lists), 119 of 119 after its fixes: see `benchmarks/results/lint_precision_heldout3.md`.
On a fourth held-out set of 11 repositories none of the 46 earlier ones overlap, 238 of 251 findings
were true (precision 0.95; loaders only read as `next(iter(loader))` or never read, a loop over
optimizers taken for a step loop), 238 of 240 after its fixes: see
`benchmarks/results/lint_precision_heldout4.md`.
On a fifth held-out set of 11 repositories none of the 57 earlier ones overlap, 69 of 115 findings
were true (precision 0.60; a clock start re-taken after a synchronised validation pass, a running loss
reset at every optimizer step, determinism and kept losses in test modules), 69 of 69 after its fixes:
see `benchmarks/results/lint_precision_heldout5.md`.
On a sixth held-out set of 11 repositories none of the 68 earlier ones overlap, 223 of 265 findings
were true (precision 0.84; checkpoint loads and process-group setup in test modules, the `forward` of
a module whose base class is imported, `scaler.step(opt)` in a loop over optimizers), 223 of 228 after
its fixes (5 left: helper files under `tests/` not named as tests): see
`benchmarks/results/lint_precision_heldout6.md`.
On a seventh held-out set of 12 repositories none of the 79 earlier ones overlap (single-file research
scripts and small trainers), 110 of 121 findings were true (precision 0.91; a reload of the checkpoint
the same script saved inside its training loop, an `.item()` giving a slice length, a helper only
called under `no_grad`), 110 of 110 after its fixes: see `benchmarks/results/lint_precision_heldout7.md`.
On an eighth held-out set of 12 repositories none of the 93 earlier ones overlap, 85 of 96 findings
were true (precision 0.89; a U-Net skip-connection stack popped in the same call for GD202, loaders with
nothing to pin for GD104, a `step(closure)` that zeroes the gradients for GD602, anomaly detection on
the NaN path for GD505), 85 of 87 after its fixes (GD202, GD602, GD104): see `benchmarks/results/lint_precision_heldout8.md`.
On a ninth held-out set of 12 repositories none of the ~105 earlier ones overlap (RL loops, tutorials,
segmentation, detection, GANs, small LLM training), 84 of 87 findings were true (precision 0.97; an
`.item()` after a sync called through an alias for GD502, an in-memory expert set for GD104), 84 of 85
after its fixes (GD502; round eight's two left, GD104 on GPU latents in a list and GD505 on the NaN
path, fixed too): see `benchmarks/results/lint_precision_heldout9.md`.
On a tenth held-out set of 12 larger, engineered repositories none of the ~117 earlier ones overlap
(Megatron-LM, DeepSpeedExamples, diffusers, verl, OpenRLHF and others; 6,721 files), 509 of 592
findings were true (precision 0.86; a VAE's tiled encode through its own submodules for GD202, test
modules for GD602/GD204/GD305/GD302/GD504, objects exchanged among ranks for GD601, index and GPU
`TensorDataset`s for GD104, syncs through a GradScaler or a local function for GD501), 509 of 515
after its fixes: see `benchmarks/results/lint_precision_heldout10.md`.
On an eleventh held-out set of 11 recent repositories (last commit 2025-2026: OLMo-core, dinov3,
vjepa2, smollm, nanoVLM, prime, HRM and others; 1,448 files) none of the ~129 earlier ones overlap,
56 of 63 findings were true (precision 0.89; dummy loaders over constants for `accelerator.prepare`
for GD104, a `find_unused_parameters=True` the model's own file justifies for GD408), 56 of 59 after
its fixes (GD104): see `benchmarks/results/lint_precision_heldout11.md`.
On a twelfth held-out set of 11 repositories written by and for learners (books, course and tutorial
series: LLMs-from-scratch, d2l, pytorch-book, bentrevett's seq2seq/sentiment notebooks and others; 255
files and 164 notebooks exported to .py) none of the ~140 earlier ones overlap, 176 of 211 findings
were true (precision 0.83; `cudnn.deterministic` in RNN/transformer notebooks without convolutions for
GD503, toy loaders over literal tensors for GD104, CPU-only scripts for GD502, an MXNet file for
GD602), 176 of 187 after its fixes: see `benchmarks/results/lint_precision_heldout12.md`.
`gpudoctor explain GD502` prints one rule's section.

## Rules
"""


def rule_page(rule) -> str:
    """One rule's section: code, name, message, rationale, bad and good examples."""
    notes = [f"severity: {rule.SEVERITY}"]
    if rule.FIXABLE:
        notes.append("fixable with `--fix`")
    if rule.CODE.startswith(DEFAULT_OFF_PREFIX):
        notes.append(f"off by default (`--select {rule.CODE}`)")
    lang = "sh" if getattr(rule, "KIND", "py") == "sh" else "python"
    return (f"### {rule.CODE} {rule.NAME}\n\n"
            f"**{rule.MESSAGE}** ({'; '.join(notes)})\n\n"
            f"{rule.RATIONALE}\n\n"
            f"Bad:\n\n```{lang}\n{rule.BAD}```\n\n"
            f"Good:\n\n```{lang}\n{rule.GOOD}```\n")


def rules_markdown() -> str:
    """The whole of ``docs/lint.md``."""
    groups = "\n".join(f"| `{prefix}xx` | {text} |" for prefix, text in GROUPS.items())
    parts = [INTRO.replace("{groups}", groups)]
    index = ["| code | name | severity | fix | default |", "|---|---|---|---|---|"]
    for rule in ALL_RULES:
        default = "off" if rule.CODE.startswith(DEFAULT_OFF_PREFIX) else "on"
        index.append(f"| [{rule.CODE}](#{rule.CODE.lower()}-{rule.NAME}) | {rule.NAME} | {rule.SEVERITY} | "
                     f"{'yes' if rule.FIXABLE else ''} | {default} |")
    parts.append("\n".join(index) + "\n")
    for rule in ALL_RULES:
        parts.append(rule_page(rule))
    return "\n".join(parts)


if __name__ == "__main__":
    print(rules_markdown(), end="")

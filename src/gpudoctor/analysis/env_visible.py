"""``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` against the GPUs the driver lists.

CUDA reads ``CUDA_VISIBLE_DEVICES`` left to right and stops at the first entry it cannot
match (an index past the last GPU, ``-1``, an unknown UUID): everything after it is hidden.
"""

from __future__ import annotations

import re

from gpudoctor.analysis.env_text import row
from gpudoctor.records.env import CheckResult, EnvFacts, Layer, Verdict

NAME = "devices.visible"


def parse_visible(value: str, uuids: list[str], count: int | None) -> tuple[list[str], str]:
    """The entries CUDA will use, and why it stopped early (``""`` when it used them all)."""
    used: list[str] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            return used, "an empty entry"
        if re.fullmatch(r"-?\d+", token):
            if int(token) < 0:
                return used, f"{token} (a negative index hides the rest)"
            if count is not None and int(token) >= count:
                return used, f"{token} (there are only {count} GPUs: 0..{count - 1})"
        elif token.startswith(("GPU-", "MIG-")):
            if uuids and not any(u.startswith(token) for u in uuids):
                return used, f"{token} (no GPU has this UUID)"
        else:
            return used, f"{token!r} (not an index or a GPU-/MIG- UUID)"
        if token in used:
            return used, f"{token} listed twice"
        used.append(token)
    return used, ""


def visible_devices_row(facts: EnvFacts) -> CheckResult:
    env = facts.host.env
    gpus = facts.driver.gpus
    count = len(gpus) if facts.driver.source != "none" else None
    value = env.get("CUDA_VISIBLE_DEVICES")
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    mixed = len({g.name for g in gpus}) > 1
    if value is None:
        seen = f"all {count} GPU(s) visible" if count is not None else "no driver lists GPUs"
        if mixed and order != "PCI_BUS_ID":
            return row(Layer.DEVICES, NAME, Verdict.WARN,
                       f"CUDA_VISIBLE_DEVICES unset ({seen}), but the GPUs differ and "
                       "CUDA numbers them fastest first: torch's cuda:0 may not be nvidia-smi's 0",
                       "export CUDA_DEVICE_ORDER=PCI_BUS_ID")
        return row(Layer.DEVICES, NAME, Verdict.PASS, f"CUDA_VISIBLE_DEVICES unset: {seen}")
    if value.strip() == "":
        return row(Layer.DEVICES, NAME, Verdict.FAIL,
                   "CUDA_VISIBLE_DEVICES is set but empty: it hides every GPU",
                   "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use, e.g. 0,1")
    used, stop = parse_visible(value, [g.uuid for g in gpus], count)
    torch = facts.torch
    if stop:
        verdict = Verdict.FAIL if not used else Verdict.WARN
        shown = ",".join(used) if used else "no GPU"
        return row(Layer.DEVICES, NAME, verdict,
                   f"CUDA_VISIBLE_DEVICES={value}: CUDA stops at {stop}, so only {shown} is visible",
                   f"list existing GPUs only (nvidia-smi -L shows {count if count is not None else 'them'}); "
                   "under Slurm/Kubernetes let the scheduler set it")
    evidence = f"CUDA_VISIBLE_DEVICES={value}: {len(used)} of {count if count is not None else '?'} GPU(s) visible"
    if torch is not None and torch.cuda_available and torch.device_count != len(used):
        return row(Layer.DEVICES, NAME, Verdict.WARN,
                   evidence + f", but torch sees {torch.device_count}",
                   "check for MIG instances (nvidia-smi -L) or a changed CUDA_VISIBLE_DEVICES")
    return row(Layer.DEVICES, NAME, Verdict.PASS, evidence)

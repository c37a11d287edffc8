"""Small pure helpers shared by the environment rules: row building, version words."""

from __future__ import annotations

import re

from gpudoctor.records.env import CheckResult, Layer, Verdict
from gpudoctor.records.units import MISSING


def row(layer: Layer, name: str, verdict: Verdict, evidence: str, fix: str = "") -> CheckResult:
    """A check row; a passing row carries no fix."""
    return CheckResult(layer=layer, name=name, verdict=verdict, evidence=evidence,
                       fix="" if verdict is Verdict.PASS else fix)


def version_parts(text: str) -> tuple[int, ...]:
    """``"12.4"`` → ``(12, 4)``; ``"2.6.0rc1"`` → ``(2, 6, 0)``: each part's leading digits, up to
    the first part that has none; ``()`` when the text starts with no digit."""
    parts = []
    for piece in text.split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def version_tuple(text: str) -> tuple[int, ...]:
    """:func:`version_parts`, ``(0,)`` for no version: ``"580.95.05"`` → ``(580, 95, 5)``."""
    return version_parts(text) or (0,)


def cuda_tag(cuda: str | None, hip: str | None = None) -> str:
    """The PyTorch wheel-index tag of a build: ``"13.0"`` → ``"cu130"``; no CUDA → ``"cpu"``."""
    if hip:
        return "rocm" + ".".join(str(p) for p in version_tuple(hip)[:2])
    if not cuda:
        return "cpu"
    major, minor = (version_tuple(cuda) + (0,))[:2]
    return f"cu{major}{minor}"


def reinstall_torch(tag: str) -> str:
    """How to get the ``tag`` variant of torch, naming the index by its tag only."""
    return (f"reinstall torch's {tag} variant: `pip install --force-reinstall torch` with pip's "
            f"--index-url set to PyTorch's {tag} wheel index (pytorch.org's install selector "
            "prints the exact command); a plain `pip install torch` may give another variant")


def cudnn_words(version: int | None) -> str:
    """``torch.backends.cudnn.version()`` as text: 92400 → ``"9.24.0"``, 8902 → ``"8.9.2"``."""
    if version is None:
        return MISSING
    if version >= 10000:  # cuDNN 9+: major*10000 + minor*100 + patch
        return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return f"{version // 1000}.{version // 100 % 10}.{version % 100}"  # cuDNN ≤ 8

"""Numbers read from error messages, and the named checks catalog entries can require.

A check takes the matched line and returns ``(passed, notes)``; ``notes`` are short facts shown to
the user ("reserved but unallocated: 7.65 GiB"). Checks are pure functions over text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from gpudoctor.records.units import GIB, KIB, MIB, human_bytes

_UNITS = {"b": 1, "bytes": 1, "byte": 1, "kib": KIB, "kb": KIB, "mib": MIB, "mb": MIB,
          "gib": GIB, "gb": GIB, "tib": GIB << 10, "tb": GIB << 10, "pib": GIB << 20, "eib": GIB << 30,
          "eb": GIB << 30}
_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes?|[KMGTPE]i?B)"
_OLD = re.compile(
    rf"Tried to allocate {_SIZE} \(GPU \d+; {_SIZE} total capacity; {_SIZE} already allocated; "
    rf"{_SIZE} free; {_SIZE} reserved in total by PyTorch\)",
    re.IGNORECASE,
)
# torch 1.0-1.3 (c10/cuda/CUDACachingAllocator.cpp): "X cached" is the reserved-but-unallocated
# cache (amount_cached - amount_allocated), not the whole pool
_OLDEST = re.compile(
    rf"Tried to allocate {_SIZE} \(GPU \d+; {_SIZE} total capacity; {_SIZE} already allocated; "
    rf"{_SIZE} free; {_SIZE} cached\)",
    re.IGNORECASE,
)
_NEW_HEAD = re.compile(
    rf"Tried to allocate {_SIZE}\. GPU \d+ has a total capac\w* of {_SIZE} of which {_SIZE} is free",
    re.IGNORECASE,
)
_NEW_POOL = re.compile(
    rf"Of the allocated memory {_SIZE} is allocated by PyTorch.*?and {_SIZE} is reserved by PyTorch "
    r"but unallocated",
    re.IGNORECASE,
)
_OTHER = re.compile(rf"Process \d+ has {_SIZE} memory in use", re.IGNORECASE)
_SELF = re.compile(rf"this process has {_SIZE} memory in use", re.IGNORECASE)


def _bytes(value: str, unit: str) -> int:
    return int(float(value) * _UNITS[unit.lower()])


@dataclasses.dataclass(frozen=True, slots=True)
class OomFacts:
    """The sizes in a PyTorch CUDA OOM message; ``None`` where the message does not say."""

    requested: int
    total: int | None
    free: int | None
    allocated: int | None
    reserved_unallocated: int | None
    other_processes: tuple[int, ...] = ()
    this_process: int | None = None


def parse_oom(text: str) -> OomFacts | None:
    """Read the sizes from any wording of the caching allocator's OOM message."""
    for pattern, last_is_pool in ((_OLD, True), (_OLDEST, False)):
        old = pattern.search(text)
        if old:
            g = old.groups()
            requested, total, allocated, free, last = (
                _bytes(g[i], g[i + 1]) for i in range(0, 10, 2)
            )
            gap = max(last - allocated, 0) if last_is_pool else last
            return OomFacts(requested=requested, total=total, free=free, allocated=allocated,
                            reserved_unallocated=gap)
    head = _NEW_HEAD.search(text)
    if not head:
        return None
    g = head.groups()
    pool = _NEW_POOL.search(text)
    allocated = gap = None
    if pool:
        p = pool.groups()
        allocated, gap = _bytes(p[0], p[1]), _bytes(p[2], p[3])
    me = _SELF.search(text)
    return OomFacts(
        requested=_bytes(g[0], g[1]),
        total=_bytes(g[2], g[3]),
        free=_bytes(g[4], g[5]),
        allocated=allocated,
        reserved_unallocated=gap,
        other_processes=tuple(_bytes(v, u) for v, u in _OTHER.findall(text)),
        this_process=_bytes(*me.groups()) if me else None,
    )


def oom_fragmentation(text: str) -> tuple[bool, tuple[str, ...]]:
    """Reserved-but-unallocated cache is large: >= 1 GiB, or >= 256 MiB and at least the request
    or 30% of everything PyTorch reserved."""
    facts = parse_oom(text)
    if facts is None or facts.reserved_unallocated is None or facts.allocated is None:
        return False, ()
    gap = facts.reserved_unallocated
    reserved = facts.allocated + gap
    large = gap >= GIB or (
        gap >= 256 * MIB and (gap >= facts.requested or gap >= 0.3 * reserved)
    )
    share = f" ({gap / reserved:.0%} of reserved)" if reserved else ""
    note = (
        f"reserved but unallocated: {human_bytes(gap, 2)}{share}; "
        f"request: {human_bytes(facts.requested, 2)}"
    )
    return large, (note,)


def oom_request_exceeds_total(text: str) -> tuple[bool, tuple[str, ...]]:
    """A single request larger than the GPU's total memory."""
    facts = parse_oom(text)
    if facts is None or facts.total is None:
        return False, ()
    passed = facts.requested > facts.total
    note = f"request {human_bytes(facts.requested, 2)} vs GPU total {human_bytes(facts.total, 2)}"
    return passed, (note,)


def _held_outside(facts: OomFacts) -> int | None:
    """Memory on the GPU that neither is free nor belongs to this process's PyTorch pool, when the
    message's sizes say so: torch 1.x gives 'reserved in total by PyTorch' (1.0-1.3: the unallocated
    'cached' part); torch >= 2.1 gives
    'this process has X memory in use' (which includes this process's non-PyTorch memory)."""
    if facts.total is None or facts.free is None:
        return None
    if facts.this_process is not None:
        return max(facts.total - facts.free - facts.this_process, 0)
    if facts.allocated is not None and facts.reserved_unallocated is not None and not facts.other_processes:
        mine = facts.allocated + facts.reserved_unallocated
        return max(facts.total - facts.free - mine, 0)
    return None


# memory held outside this process counts as the cause only when it is this large: a CUDA context,
# a display and cuDNN/cuBLAS workspaces of this process take up to about 1 GiB without any other
# process, and a small remainder cannot be what filled the card
OUTSIDE_MIN = GIB
OUTSIDE_SHARE = 0.25


def oom_other_processes(text: str) -> tuple[bool, tuple[str, ...]]:
    """Other processes hold memory on the GPU (two or more listed, or one next to this process's
    own line: a single 'Process N has' without it is usually this process seen from a container)
    and they are why the request failed: with their memory free it would have fitted. Small
    contexts of sibling ranks next to a request they could not have made room for are a side
    fact, not the cause (the note still names them). Where the message lists no process (torch
    1.x, or a container that hides them), the sizes can still show it: memory neither free nor
    this process's that is >= 1 GiB and >= 25% of the GPU is held by someone else."""
    facts = parse_oom(text)
    if facts is None:
        return False, ()
    others = facts.other_processes
    if not others:
        outside = _held_outside(facts)
        if outside is None or facts.total is None or facts.free is None:
            return False, ()
        large = outside >= OUTSIDE_MIN and outside >= OUTSIDE_SHARE * facts.total
        decisive = facts.free + outside >= facts.requested
        note = (f"{human_bytes(outside, 2)} of the GPU's {human_bytes(facts.total, 2)} is neither free "
                f"nor held by this process's PyTorch allocator (another process, or non-PyTorch memory)")
        return large and decisive, (note,) if large else ()
    listed = len(others) >= 2 or (
        len(others) == 1 and facts.this_process is not None and others[0] >= 256 * MIB
    )
    held = sum(others)
    decisive = facts.free is None or facts.free + held >= facts.requested
    note = f"{len(others)} other process(es) hold {human_bytes(held, 2)} on this GPU"
    if listed and not decisive:
        note += (f"; even with it free, {human_bytes(facts.free + held, 2)} < the "
                 f"{human_bytes(facts.requested, 2)} requested")
    return listed and decisive, (note,) if others else ()


CHECKS: dict[str, Callable[[str], tuple[bool, tuple[str, ...]]]] = {
    "oom_fragmentation": oom_fragmentation,
    "oom_request_exceeds_total": oom_request_exceeds_total,
    "oom_other_processes": oom_other_processes,
}


_LOSS_VALUE = re.compile(
    r"(?<![a-z0-9])loss(?:_\w+)?\b[\w\s]*?['\"]?\s*[:=]?\s*\[?(?P<v>[+-]?(?:nan|inf(?:inity)?|\d+(?:\.\d*)?(?:e[+-]?\d+)?))(?![\w.])",
    re.IGNORECASE,
)
_STEP = re.compile(r"\b(?P<k>step|iter|iteration|it|epoch|batch)\b\s*[:=#]?\s*\[?(?P<n>\d+)", re.IGNORECASE)
_LOOKBACK = 20_000


def _loss_at(line: str) -> str | None:
    if "loss" not in line.lower():
        return None
    match = _LOSS_VALUE.search(line)
    return match.group("v") if match else None


_FINEST = ("step", "iter", "iteration", "it", "batch", "epoch")  # the finest counter names the moment


def _where(line: str, index: int) -> str:
    found = sorted(_STEP.finditer(line), key=lambda m: _FINEST.index(m.group("k").lower()))
    return f"{found[0].group('k').lower()} {found[0].group('n')} (line {index + 1})" if found else f"line {index + 1}"


def loss_turned_nonfinite(lines: list[str], index: int) -> tuple[str, ...]:
    """For a log whose losses turn nan/inf: where the first non-finite loss is and the last finite
    one before it ("loss turned nan at step 200 (line 5); last finite: 2.31 at step 100 (line 4)")."""
    first = None
    for i in range(max(0, index - _LOOKBACK), min(len(lines), index + 1)):
        value = _loss_at(lines[i])
        if value is not None and value.lower().lstrip("+-").startswith(("nan", "inf")):
            first = i
            break
    if first is None:
        return ()
    turned = _loss_at(lines[first]).lower().lstrip("+-")[:3]
    for j in range(first - 1, max(-1, first - _LOOKBACK), -1):
        value = _loss_at(lines[j])
        if value is not None and not value.lower().lstrip("+-").startswith(("nan", "inf")):
            return (f"loss turned {turned} at {_where(lines[first], first)}; last finite loss {value} at "
                    f"{_where(lines[j], j)}",)
    return (f"loss is already {turned} at its first value in the log ({_where(lines[first], first)}): "
            "check the inputs and the initialisation before the learning rate",)


_CAPABILITY = re.compile(r"with CUDA capability (sm_\d+) is not compatible", re.IGNORECASE)
_SUPPORTED = re.compile(r"supports CUDA capabilities ((?:sm_\d+\s*)+)", re.IGNORECASE)
# GPU families newer than many installed torch builds, by the name nvidia-smi / torch prints
_GPU_ARCH = (
    (re.compile(r"\bRTX (?:PRO )?50\d0\b|\bRTX PRO 6000 Blackwell|\bB200\b|\bB100\b|\bGB200\b"), "sm_100/sm_120"),
    (re.compile(r"\bH100\b|\bH200\b|\bGH200\b|\bH800\b"), "sm_90"),
    (re.compile(r"\bRTX 40\d0\b|\bL4\b|\bL40S?\b|\bRTX 6000 Ada\b"), "sm_89"),
    (re.compile(r"\bRTX 30\d0(?: Ti)?\b|\bA10G?\b|\bA40\b|\bRTX A\d000\b"), "sm_86"),
    (re.compile(r"\bA100\b|\bA800\b|\bA30\b"), "sm_80"),
)


def capability_gap(lines: list[str], index: int) -> tuple[str, ...]:
    """For a kernel-image or cuDNN failure: the GPU's compute capability when the log shows it
    (torch's "with CUDA capability sm_86 is not compatible" warning, or a GPU name), with the
    capabilities the installed build supports: the build is too old for that sm_XX."""
    window = "\n".join(lines[max(0, index - _LOOKBACK // 100): index + 50])
    found = _CAPABILITY.search(window)
    arch = found.group(1) if found else None
    if arch is None:
        for pattern, name in _GPU_ARCH:
            if pattern.search(window):
                arch = name
                break
    if arch is None:
        return ()
    supported = _SUPPORTED.search(window)
    have = f" (it has kernels for {' '.join(supported.group(1).split())})" if supported else ""
    certain = "" if found else "if the build predates this GPU: "
    return (f"{certain}this torch build is too old for {arch}{have}: install a build whose "
            f"torch.cuda.get_arch_list() includes {arch.split('/')[0]} (a newer torch with a newer CUDA, "
            "e.g. a cu118/cu12x wheel)",)


# notes computed from the whole log for an entry (by id), given the lines and the first matched line
LOG_NOTES: dict[str, Callable[[list[str], int], tuple[str, ...]]] = {
    "nan-loss": loss_turned_nonfinite,
    "no-kernel-image": capability_gap,
    "cudnn-status-error": capability_gap,
}

"""Copies that hold up the step although they are pinned and asynchronous: the bytes themselves.

Pinned memory and ``non_blocking=True`` make a copy run at the bus's rate without blocking the
host; they do not make the bytes fewer. A copy on the training stream still runs between the
kernels, so the GPU computes nothing while it lasts. The profiler window times every copy on the
GPU timeline; the part no kernel overlapped (``Breakdown.copy_ms``) is what the step pays. The
achieved rate is set against the link's ceiling (``gpudoctor bench copy``'s measured figure when
the run directory holds one, else the datasheet's PCIe line rate): at the ceiling only fewer bytes
or overlap help. Pageable or blocking copies are GD-RUN-H2D-PAGEABLE's and -BLOCKING's.

Expected gain, per mean step, from the same timeline: the better of (a) sending float32 inputs as
bf16 (half the bytes; uint8 images shrink them to a quarter) and (b) overlapping the copy with
the previous step's compute on a side stream (it then costs ``max(0, copy - rest of step)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding
from gpudoctor.records.gpu_specs import match_spec, pcie_gbs

CODE_COPY_BOUND = "GD-RUN-COPY-BOUND"

# name: (value, why) — this rule's own thresholds, kept with the rule
THRESHOLDS = {
    "min_share": (0.10, "copies that no kernel overlaps take a tenth of the step: the warn_gain bar, "
                        "below which a finding about them could not be measured"),
    "pageable_max_frac": (0.5, "when most copied bytes are pageable, the staging copy is the cause "
                               "(GD-RUN-H2D-PAGEABLE), not the byte count"),
    "at_ceiling": (0.7, "70% of the link's rate: large pinned copies reach 80-90% of the PCIe line "
                        "rate (55.5 of 63 GB/s on an H200, docs/examples/bench-1gpu.txt), so from "
                        "here the link, not the copy's setup, sets the time"),
    "bf16_bytes": (0.5, "a float32 input sent as bf16 is half the bytes (uint8 images: a quarter; "
                        "the gain is quoted for the smaller saving)"),
}


@dataclass(frozen=True, slots=True)
class CopyLoad:
    """One direction's copies in the window, per step."""

    kind: str  # "HtoD" or "DtoH"
    bytes_per_step: float | None  # None: neither the trace nor the probes counted them
    gpu_ms_per_step: float
    pinned_frac: float

    @property
    def gbs(self) -> float | None:
        if not self.bytes_per_step or self.gpu_ms_per_step <= 0:
            return None
        return self.bytes_per_step / (self.gpu_ms_per_step * 1e6)


def copy_loads(rf: RankFacts) -> dict[str, CopyLoad]:
    """The window's host-device copies by direction (device-to-device copies are kernels' work)."""
    w, n = rf.window, rf.window_steps
    if w is None or not n:
        return {}
    out = {}
    for kind in ("HtoD", "DtoH"):
        rows = [m for m in w.memcpy if m.kind == kind]
        if not rows:
            continue
        gpu_ms = sum(m.total_us for m in rows) / 1000.0 / n
        if all(m.bytes is not None for m in rows) and sum(m.bytes for m in rows):
            total = sum(m.bytes for m in rows)
            pinned = sum(m.bytes for m in rows if m.pinned) / total
            out[kind] = CopyLoad(kind=kind, bytes_per_step=total / n, gpu_ms_per_step=gpu_ms, pinned_frac=pinned)
        elif kind == "HtoD" and rf.stats.h2d_bytes:
            # the trace gave no byte counts (some torch builds): the probes count every copy
            s = rf.stats
            out[kind] = CopyLoad(kind=kind, bytes_per_step=s.h2d_bytes, gpu_ms_per_step=gpu_ms,
                                 pinned_frac=1.0 - s.h2d_pageable_bytes / s.h2d_bytes)
        else:
            time_share = sum(m.total_us for m in rows if m.pinned) / max(1e-9, sum(m.total_us for m in rows))
            out[kind] = CopyLoad(kind=kind, bytes_per_step=None, gpu_ms_per_step=gpu_ms, pinned_frac=time_share)
    return out


def link_ceiling(rf: RankFacts, measured_gbs: float | None) -> tuple[float | None, str]:
    """(GB/s, where the figure comes from) of the host link, one direction."""
    if measured_gbs:
        return measured_gbs, "measured by gpudoctor bench copy (pinned)"
    spec = match_spec(rf.config.device_name) if rf.config is not None and rf.config.device_name else None
    line = pcie_gbs(spec.pcie_gen, 16) if spec is not None else None
    if line is None:
        return None, ""
    return line, f"PCIe Gen{spec.pcie_gen} x16 line rate of the {spec.name} (datasheet)"


def check_copy_bound(facts: RunFacts, th: Thresholds, measured_gbs: float | None = None) -> list[Finding]:
    """The rank whose step loses the most to copies it could shrink or hide."""
    if not facts.on_gpu:
        return []
    return worst_rank(facts.ranks, lambda rf: _copy_bound(rf, th, measured_gbs), lambda rf: rf.rank)


def _copy_bound(rf: RankFacts, th: Thresholds, measured_gbs: float | None) -> list[Finding]:
    b = rf.breakdown
    step = b.step_ms
    loads = copy_loads(rf)
    if not b.gpu_timeline or step <= 0 or not loads or b.copy_ms < THRESHOLDS["min_share"][0] * step:
        return []
    load = max(loads.values(), key=lambda c: c.gpu_ms_per_step)
    issue_ms = (rf.stats.mean_h2d_ms or 0.0) if load.kind == "HtoD" else 0.0  # the probes time H2D issue only
    exposed = min(b.copy_ms, load.gpu_ms_per_step + issue_ms)
    if load.kind == "HtoD" and load.pinned_frac < 1.0 - THRESHOLDS["pageable_max_frac"][0]:
        return []
    size = f"{load.bytes_per_step / 1e6:,.1f} MB" if load.bytes_per_step else "data"
    evidence = [f"rank {rf.rank}: {size} copied "
                f"{'host-to-device' if load.kind == 'HtoD' else 'device-to-host'} per step, "
                f"{ms(load.gpu_ms_per_step)} on the GPU; {ms(exposed)} of a {ms(step)} mean step "
                f"({pct(exposed / step)}) overlapped by no kernel",
                _rate_line(rf, load, measured_gbs)]
    if load.kind == "HtoD":
        return _h2d(rf, th, load, exposed, evidence)
    gain = exposed / step
    return performance_finding(
        code=CODE_COPY_BOUND, gain=gain, thresholds=th,
        title=f"Device-to-host copies every step leave the GPU computing nothing for "
              f"{pct(exposed / step)} of it",
        evidence=evidence,
        fix=("# keep per-step results on the GPU: reduce them there (sums, argmax, a metric's\n"
             "# state) and copy only the reduced values, or every N steps\n"
             "preds_gpu.append(logits.argmax(1))          # not logits.cpu() every step\n"
             "if step % log_every == 0:\n"
             "    preds = torch.cat(preds_gpu).cpu(); preds_gpu.clear()"),
    )


def _rate_line(rf: RankFacts, load: CopyLoad, measured_gbs: float | None) -> str:
    ceiling, source = link_ceiling(rf, measured_gbs)
    gbs = load.gbs
    if gbs is None:
        return "achieved rate unknown (the trace counted no bytes for these copies)"
    if ceiling is None:
        return f"achieved {gbs:,.1f} GB/s (no ceiling known for this GPU: gpudoctor bench copy measures it)"
    at = gbs >= THRESHOLDS["at_ceiling"][0] * ceiling
    return (f"achieved {gbs:,.1f} GB/s, {pct(gbs / ceiling)} of {ceiling:,.1f} GB/s ({source})"
            + (": at the link's ceiling, only fewer bytes or overlap shorten it" if at else ""))


def _h2d(rf: RankFacts, th: Thresholds, load: CopyLoad, exposed: float, evidence: list[str]) -> list[Finding]:
    step = rf.breakdown.step_ms
    s = rf.stats
    wide = min(1.0, s.h2d_wide_float_bytes / s.h2d_bytes) if s.h2d_bytes else 0.0
    fewer = exposed * wide * (1.0 - THRESHOLDS["bf16_bytes"][0])
    hidden = min(exposed, max(0.0, step - exposed))
    if wide:
        evidence.append(f"{pct(wide)} of the bytes are float32/float64: as bf16 they are half "
                        f"(uint8 images: a quarter), saving >= {ms(fewer)} a step")
    evidence.append(f"on a side stream under the previous step's compute the copy would cost "
                    f"{ms(exposed - hidden)} instead of {ms(exposed)}")
    fix = ["# the copies are pinned and asynchronous already: the bytes are the cost"]
    if wide:
        fix += ["# send 8-bit images as uint8 and convert on the GPU (a quarter of float32's bytes)",
                "x = x_u8.to(device, non_blocking=True).float().div_(255).sub_(mean).div_(std)",
                "# float features: send bf16 (cast in the Dataset or collate_fn), upcast on the GPU"]
    fix += ["# data that is the same every step: move it to the GPU once, outside the loop",
            "# and overlap: copy batch n+1 on a side stream while step n computes",
            "copy_stream = torch.cuda.Stream()",
            "with torch.cuda.stream(copy_stream):",
            "    nxt = next_batch.to(device, non_blocking=True)",
            "torch.cuda.current_stream().wait_stream(copy_stream)   # before using nxt"]
    return performance_finding(
        code=CODE_COPY_BOUND, gain=max(fewer, hidden) / step, thresholds=th,
        title=f"Copy-bound input: {load.bytes_per_step / 1e6:,.0f} MB a step over the host link "
              f"leave the GPU computing nothing for {pct(exposed / step)} of it" if load.bytes_per_step else
              f"Copy-bound input: host-to-device copies leave the GPU computing nothing for "
              f"{pct(exposed / step)} of each step",
        evidence=evidence, fix="\n".join(fix),
    )


__all__ = ["CODE_COPY_BOUND", "CopyLoad", "check_copy_bound", "copy_loads", "link_ceiling"]

"""GPU compute: launch-overhead bound (tiny kernels, GPU idle between them) and fp32 compute,
with the speed of light: FLOPs per step against this GPU's peak for the precision in use (MFU)."""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.breakdown import host_active_ms
from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.sync_rules import unexplained_idle
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding
from gpudoctor.records.gpu_specs import match_spec

CODE_LAUNCH = "GD-RUN-LAUNCH-BOUND"
CODE_FP32 = "GD-RUN-FP32-COMPUTE"

_LOW_PRECISION = ("bfloat16", "float16", "torch.bfloat16", "torch.float16")
_AUTOCAST_DTYPE = {"bfloat16": "bf16", "torch.bfloat16": "bf16", "float16": "fp16",
                   "torch.float16": "fp16"}


@dataclass(frozen=True, slots=True)
class Speed:
    """Achieved FLOP rate of one rank against its GPU's datasheet peak.

    Attributes:
        dtype: the precision the matmuls and convolutions ran in ("fp32", "tf32", "bf16", ...).
        tflops: achieved TFLOP/s over the median step (model FLOPs of the window per step).
        peak_tflops: the GPU's dense peak in ``dtype``; ``bf16_peak_tflops``: in bf16.
    """

    dtype: str
    tflops: float
    peak_tflops: float | None
    bf16_peak_tflops: float | None

    @property
    def mfu(self) -> float | None:
        return None if not self.peak_tflops else self.tflops / self.peak_tflops


def compute_dtype(rf: RankFacts) -> str:
    """The precision the GPU's matmuls and convolutions ran in: autocast's dtype, else TF32 when
    enabled for matmuls or when the window's kernels are TF32 ones (cuDNN convolutions use TF32
    by default), else fp32."""
    cfg = rf.config
    if cfg is not None:
        for dtype in cfg.autocast_dtypes:
            if dtype in _AUTOCAST_DTYPE:
                return _AUTOCAST_DTYPE[dtype]
        if any(d in _LOW_PRECISION for d in cfg.param_dtypes):
            return _AUTOCAST_DTYPE[next(d for d in cfg.param_dtypes if d in _LOW_PRECISION)]
        if cfg.tf32_matmul or cfg.float32_matmul_precision in ("high", "medium"):
            return "tf32"
    if rf.window is not None and any("tf32" in k.name for k in rf.window.top_kernels):
        return "tf32"
    return "fp32"


def speed(rf: RankFacts) -> Speed | None:
    """FLOP rate of ``rf`` (``None`` without the window's FLOP count or a step time)."""
    w = rf.window
    if w is None or not w.flops or rf.stats.step_ms <= 0:
        return None
    tflops = w.flops / rf.window_steps / (rf.stats.step_ms / 1000.0) / 1e12
    dtype = compute_dtype(rf)
    spec = match_spec(rf.config.device_name) if rf.config is not None and rf.config.device_name else None
    return Speed(dtype=dtype, tflops=tflops,
                 peak_tflops=spec.peak_tflops(dtype) if spec is not None else None,
                 bf16_peak_tflops=spec.peak_tflops("bf16") if spec is not None else None)


def speed_line(sp: Speed) -> str:
    """Evidence wording of a :class:`Speed`."""
    line = f"{sp.tflops:.1f} TFLOP/s achieved in {sp.dtype} (matmul and convolution FLOPs)"
    if sp.mfu is not None:
        line += f" = {pct(sp.mfu)} of this GPU's {sp.peak_tflops:g} TFLOP/s {sp.dtype} peak (MFU)"
    if sp.bf16_peak_tflops and sp.dtype in ("fp32", "tf32"):
        line += f"; its bf16 peak is {sp.bf16_peak_tflops:g}"
    return line


# The batch line of the launch-bound prescription, named so that ``gpudoctor fix`` quotes it as
# advice: a larger batch changes what the script computes (fewer optimizer steps an epoch, a
# learning rate to rescale), so it is never patched; torch.compile is (the ``compile`` change).
LAUNCH_BATCH = "loader = DataLoader(ds, batch_size=4 * B, ...)    # bigger batch (scale the LR with it)"


def check_launch_bound(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Many tiny kernels with the GPU idle between them: the host cannot launch fast enough.

    Expected gain = the GPU idle share not explained by data, copies or collectives: a larger
    batch, CUDA graphs or ``torch.compile`` do the same work in fewer, longer kernels, so the
    GPU stops waiting for launches (upper bound: the GPU then runs back to back).
    """
    if not facts.on_gpu or not facts.ranks:
        return []
    return worst_rank(facts.ranks, lambda rf: _launch_bound(rf, th), lambda rf: rf.rank)


def _launch_bound(rf: RankFacts, th: Thresholds) -> list[Finding]:
    w = rf.window
    if w is None or not w.kernel_count:
        return []
    tiny = (w.kernels_under_10us_frac is not None
            and w.kernels_under_10us_frac >= th.tiny_kernel_min_frac) or (
        w.kernel_us_p50 is not None and w.kernel_us_p50 < th.tiny_kernel_us)
    idle = unexplained_idle(rf)
    if not tiny or idle is None or idle < th.idle_min_share:
        return []
    gain, host_line = _launch_gain(rf, idle, th)
    per_step = w.kernel_count / rf.window_steps
    evidence = [
        f"{per_step:.0f} kernels per step, median {w.kernel_us_p50 or 0:.1f} us, "
        f"{pct(w.kernels_under_10us_frac)} under 10 us, rank {rf.rank}",
        f"GPU busy {pct(rf.busy_frac)} of the step; idle {pct(idle)} not explained by data, "
        "copies or collectives",
    ]
    if host_line:
        evidence.append(host_line)
    if rf.host_ops_line():
        evidence.append(rf.host_ops_line())
    if rf.stats.samples:
        evidence.append(f"batch size {rf.stats.samples:.0f}")
    return performance_finding(
        code=CODE_LAUNCH, gain=gain, thresholds=th,
        title=f"CPU launch-overhead bound: tiny kernels leave the GPU idle {pct(idle)} of each step",
        evidence=evidence, fix="\n".join(launch_fix(rf)),
    )


def _launch_gain(rf: RankFacts, idle: float, th: Thresholds) -> tuple[float, str]:
    """(expected gain, evidence line) of fewer, longer kernels.

    Without syncs the host runs ahead and the idle time is the launches' doing: the gain is the
    idle share. With syncs every step, host (``H``, its own work) and GPU (``G``, busy) take
    turns; removing the syncs alone overlaps them (GD-RUN-HOST-SYNC's gain), and fewer launches
    then save only what the host still needs beyond the GPU, ``H - G``. So "launch-bound" with
    syncs is concluded only when ``H`` exceeds ``G`` by ``host_bound_margin``.
    """
    step = rf.breakdown.step_ms
    if rf.stats.host_syncs < th.sync_min_per_step or step <= 0:
        return idle, ""
    host = host_active_ms(rf.stats, rf.window)
    busy = rf.breakdown.gpu_busy_ms
    if host is None or busy is None:
        return idle, ""
    beyond = max(0.0, host - busy)
    line = (f"{rf.stats.host_syncs:.0f} host sync(s) per step; the host works ~{ms(host)} per step "
            f"against the GPU's {ms(busy)}")
    if host < th.host_bound_margin * busy:
        return min(idle, beyond / step), (
            line + f": within {th.host_bound_margin:g}x of each other, so the syncs, which make "
                   "them take turns, cost more than the launches (see GD-RUN-HOST-SYNC)")
    return min(idle, beyond / step), (
        line + f": over {th.host_bound_margin:g}x the GPU's, so even without the syncs the host "
               f"could not keep the GPU fed; fewer launches save up to {ms(min(beyond, idle * step))}")


def launch_fix(rf: RankFacts) -> list[str]:
    """The launch-bound prescription, fitted to what the script already does: no torch.compile
    line for a compiled model (CUDA graphs instead), and the script's own optimizer class."""
    cfg = rf.config
    fix = ["# do the same work in fewer, longer kernels:", LAUNCH_BATCH]
    if cfg is None or not cfg.compiled:
        fix.append("model = torch.compile(model)                      # fuses element-wise kernels")
        fix.append("# or capture the step as a CUDA graph: torch.compile(model, mode=\"reduce-overhead\")")
    else:
        fix.append("model = torch.compile(model, mode=\"reduce-overhead\")  # compiled already: add CUDA graphs")
    line = optimizer_line(cfg)
    if line:
        fix.append(line)
    return fix


# torch.optim classes with a fused (one kernel per step) CUDA implementation in every torch this
# project supports (2.4 on); the rest get foreach
_FUSED = ("Adam", "AdamW", "SGD")


def optimizer_line(cfg) -> str | None:
    """One line that makes the script's own optimizer launch fewer kernels, or ``None`` when it
    already does (fused) or its class is not torch's."""
    if cfg is None or cfg.optimizer_fused:
        return None
    name = cfg.optimizer or ""
    if name in _FUSED:
        return f"opt = torch.optim.{name}(model.parameters(), ..., fused=True)  # one kernel per step"
    if name and cfg.optimizer_foreach is not True:
        return (f"opt = {name}(model.parameters(), ..., foreach=True)  # one kernel per op for all "
                "parameters (torch.optim classes)")
    return None


def check_fp32_compute(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Compute-bound in fp32 without autocast: tensor cores mostly unused.

    Expected gain = the compute share x (1 - 1/speed-up): the GPU's kernel time shrinks by the
    speed-up of bf16 autocast (``Thresholds.bf16_speedup``, or ``tf32_speedup`` when TF32 is
    already on), the rest stays.
    """
    if not facts.on_gpu or not facts.ranks:
        return []
    return worst_rank(facts.ranks, lambda rf: _fp32_compute(rf, th), lambda rf: rf.rank)


def _fp32_compute(rf: RankFacts, th: Thresholds) -> list[Finding]:
    cfg = rf.config
    busy = rf.busy_frac
    if cfg is None or busy is None or busy < th.compute_min_busy:
        return []
    if cfg.autocast_dtypes or any(d in _LOW_PRECISION for d in cfg.param_dtypes):
        return []
    b = rf.breakdown
    compute = b.share("compute") if b.gpu_timeline else busy
    tf32 = bool(cfg.tf32_matmul) or cfg.float32_matmul_precision in ("high", "medium")
    speedup = th.tf32_speedup if tf32 else th.bf16_speedup
    gain = compute * (1.0 - 1.0 / speedup)
    evidence = [
        f"GPU busy {pct(busy)} of a {ms(rf.stats.step_ms)} step, {pct(compute)} in compute "
        f"kernels; no autocast, parameters {', '.join(cfg.param_dtypes) or 'float32'}, rank {rf.rank}",
    ]
    sp = speed(rf)
    if sp is not None:
        evidence.append(speed_line(sp))
    evidence += [
        f"TF32 matmul {cfg.tf32_matmul}, TF32 cuDNN {cfg.tf32_cudnn}, "
        f"cudnn.benchmark {cfg.cudnn_benchmark}, channels_last {cfg.channels_last}",
        f"expected gain assumes a {speedup:.1f}x faster compute part "
        f"({'bf16 over TF32' if tf32 else 'bf16 over fp32'}); prove it with --try bf16",
    ]
    fix = []
    if not cfg.cudnn_benchmark:
        fix.append("torch.backends.cudnn.benchmark = True          # fastest conv algorithms, fixed shapes")
    if not tf32:
        fix.append("torch.backends.cuda.matmul.allow_tf32 = True   # TF32 for what stays fp32")
        fix.append("torch.backends.cudnn.allow_tf32 = True")
    if cfg.channels_last is False:
        fix.append("model = model.to(memory_format=torch.channels_last)  # conv nets: NHWC kernels")
    fix += [
        "with torch.autocast(\"cuda\", dtype=torch.bfloat16):  # tensor cores; no GradScaler with bf16",
        "    loss = criterion(model(x), y)",
        "loss.backward()",
    ]
    return performance_finding(
        code=CODE_FP32, gain=gain, thresholds=th,
        title=f"Compute-bound in fp32: the GPU is busy {pct(busy)} of the step without mixed precision",
        evidence=evidence, fix="\n".join(fix),
    )


__all__ = ["CODE_FP32", "CODE_LAUNCH", "LAUNCH_BATCH", "launch_fix", "optimizer_line", "Speed", "check_fp32_compute", "check_launch_bound",
           "compute_dtype", "speed", "speed_line"]

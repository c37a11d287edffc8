"""GPU compute: launch-overhead bound (tiny kernels, GPU idle between them) and fp32 compute."""

from __future__ import annotations

from gpudoctor.analysis.facts import RunFacts
from gpudoctor.analysis.prescription import pct, performance_finding
from gpudoctor.analysis.sync_rules import unexplained_idle
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding

CODE_LAUNCH = "GD-RUN-LAUNCH-BOUND"
CODE_FP32 = "GD-RUN-FP32-COMPUTE"

_LOW_PRECISION = ("bfloat16", "float16", "torch.bfloat16", "torch.float16")


def check_launch_bound(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Many tiny kernels with the GPU idle between them: the host cannot launch fast enough.

    Expected gain = the GPU idle share not explained by data or copies: a larger batch, CUDA
    graphs or ``torch.compile`` do the same work in fewer, longer kernels, so the GPU stops
    waiting for launches (upper bound: the GPU then runs back to back).
    """
    if not facts.on_gpu or not facts.ranks:
        return []
    rf = facts.ranks[0]
    w = rf.window
    if w is None or not w.kernel_count:
        return []
    tiny = (w.kernels_under_10us_frac is not None
            and w.kernels_under_10us_frac >= th.tiny_kernel_min_frac) or (
        w.kernel_us_p50 is not None and w.kernel_us_p50 < th.tiny_kernel_us)
    idle = unexplained_idle(rf)
    if not tiny or idle is None or idle < th.idle_min_share:
        return []
    if rf.stats.host_syncs >= th.sync_min_per_step:
        return []  # a sync every step stops the host running ahead: GD-RUN-HOST-SYNC comes first
    per_step = w.kernel_count / rf.window_steps
    evidence = [
        f"{per_step:.0f} kernels per step, median {w.kernel_us_p50 or 0:.1f} us, "
        f"{pct(w.kernels_under_10us_frac)} under 10 us",
        f"GPU busy {pct(rf.busy_frac)} of the step; idle {pct(idle)} not explained by data or copies",
    ]
    if rf.stats.samples:
        evidence.append(f"batch size {rf.stats.samples:.0f}")
    fix = [
        "# do the same work in fewer, longer kernels:",
        "loader = DataLoader(ds, batch_size=4 * B, ...)    # bigger batch (scale the LR with it)",
        "model = torch.compile(model)                      # fuses element-wise kernels",
        "# or capture the step as a CUDA graph: torch.compile(model, mode=\"reduce-overhead\")",
    ]
    if rf.config is not None and not rf.config.optimizer_fused:
        fix.append("opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # one kernel per step")
    return performance_finding(
        code=CODE_LAUNCH, gain=idle, thresholds=th,
        title=f"CPU launch-overhead bound: tiny kernels leave the GPU idle {pct(idle)} of each step",
        evidence=evidence, fix="\n".join(fix),
    )


def check_fp32_compute(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Compute-bound in fp32 without autocast: tensor cores mostly unused.

    Expected gain = busy share x (1 - 1/speed-up): the GPU part of the step shrinks by the
    speed-up of bf16 autocast (``Thresholds.bf16_speedup``, or ``tf32_speedup`` when TF32 is
    already on), the host part stays.
    """
    if not facts.on_gpu or not facts.ranks:
        return []
    rf = facts.ranks[0]
    cfg = rf.config
    busy = rf.busy_frac
    if cfg is None or busy is None or busy < th.compute_min_busy:
        return []
    if cfg.autocast_dtypes or any(d in _LOW_PRECISION for d in cfg.param_dtypes):
        return []
    tf32 = bool(cfg.tf32_matmul) or cfg.float32_matmul_precision in ("high", "medium")
    speedup = th.tf32_speedup if tf32 else th.bf16_speedup
    gain = busy * (1.0 - 1.0 / speedup)
    evidence = [
        f"GPU busy {pct(busy)} of the step, no autocast, parameters "
        f"{', '.join(cfg.param_dtypes) or 'float32'}",
        f"TF32 matmul {cfg.tf32_matmul}, TF32 cuDNN {cfg.tf32_cudnn}, "
        f"cudnn.benchmark {cfg.cudnn_benchmark}, channels_last {cfg.channels_last}",
        f"expected gain assumes a {speedup:.1f}x faster GPU part "
        f"({'bf16 over TF32' if tf32 else 'bf16 over fp32'})",
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


__all__ = ["CODE_FP32", "CODE_LAUNCH", "check_fp32_compute", "check_launch_bound"]

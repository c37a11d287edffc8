"""Convolutional nets, in any precision: memory format and cuDNN's algorithm search.

cuDNN's fast convolution kernels on tensor cores work in NHWC (channels_last). Fed NCHW tensors,
it converts them before and after each convolution: ``nchwToNhwcKernel`` / ``nhwcToNchwKernel``
in the profiler window. That conversion time is exactly what ``channels_last`` saves, so the
expected gain is measured, not assumed. The rules read the window's top kernels, so they apply
under autocast as well as in fp32.
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity

CODE_CHANNELS_LAST = "GD-RUN-CHANNELS-LAST"
CODE_CUDNN_BENCHMARK = "GD-RUN-CUDNN-BENCHMARK"

LAYOUT_KERNELS = ("nchwToNhwc", "nhwcToNchw")
CONV_MARKS = ("conv", "implicit_gemm", "wgrad", "dgrad", "fprop", "winograd")


def is_conv_net(rf: RankFacts) -> bool:
    """The window's top kernels include convolutions."""
    return rf.window is not None and any(
        any(mark in k.name.lower() for mark in CONV_MARKS) for k in rf.window.top_kernels)


def layout_ms(rf: RankFacts) -> float:
    """GPU time per step converting between NCHW and NHWC (top kernels only: a lower bound)."""
    if rf.window is None:
        return 0.0
    total = sum(k.total_us for k in rf.window.top_kernels if any(n in k.name for n in LAYOUT_KERNELS))
    return rf.per_step(total / 1000.0)


def check_channels_last(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """A conv net fed NCHW tensors: cuDNN converts layouts around every convolution.

    Expected gain = the conversion kernels' time per step over the mean step (it goes away with
    channels_last; counted only while the GPU is the bottleneck, so capped at the compute share).
    """
    if not facts.on_gpu:
        return []
    return worst_rank(facts.ranks, lambda rf: _channels_last(rf, th), lambda rf: rf.rank)


def _channels_last(rf: RankFacts, th: Thresholds) -> list[Finding]:
    if rf.config is None or rf.config.channels_last or not is_conv_net(rf):
        return []
    convert = layout_ms(rf)
    b = rf.breakdown
    if not convert or not b.gpu_timeline or b.step_ms <= 0:
        return []
    gain = min(convert, b.compute_ms) / b.step_ms
    precision = ", ".join(rf.config.autocast_dtypes) or "fp32"
    return performance_finding(
        code=CODE_CHANNELS_LAST, gain=gain, thresholds=th,
        title=f"Conv net in NCHW: converting layouts for cuDNN takes {pct(gain)} of each step",
        evidence=[
            f"nchwToNhwc/nhwcToNchw kernels: {ms(convert)} of GPU time per step of "
            f"{ms(b.step_ms)}, rank {rf.rank}",
            f"precision {precision}, channels_last {rf.config.channels_last}",
        ],
        fix=("model = model.to(memory_format=torch.channels_last)\n"
             "x = x.to(device, memory_format=torch.channels_last, non_blocking=True)"),
    )


def check_cudnn_benchmark(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """A conv net with ``cudnn.benchmark`` off: cuDNN picks algorithms by heuristics, not by
    timing them. No expected gain is claimed (it depends on the shapes): INFO, prove it with
    ``--try cudnn_benchmark``."""
    if not facts.on_gpu:
        return []
    return worst_rank(facts.ranks, lambda rf: _benchmark(rf, th), lambda rf: rf.rank)


def _benchmark(rf: RankFacts, th: Thresholds) -> list[Finding]:
    cfg = rf.config
    if cfg is None or cfg.cudnn_benchmark is not False or not is_conv_net(rf):
        return []
    if rf.busy_frac is not None and rf.busy_frac < th.cudnn_benchmark_min_busy:
        return []  # the GPU mostly waits: faster convolutions would not shorten the step
    return [Finding(
        code=CODE_CUDNN_BENCHMARK, severity=Severity.INFO,
        title="Conv net with torch.backends.cudnn.benchmark off: convolution algorithms not timed",
        evidence=(f"convolution kernels among the window's top kernels, rank {rf.rank}; "
                  f"GPU busy {pct(rf.busy_frac)} of the step",
                  "with fixed input shapes, benchmark mode times the algorithms once and keeps the "
                  "fastest; measure it: gpudoctor run --try cudnn_benchmark -- ..."),
        fix="torch.backends.cudnn.benchmark = True   # once, before training; input shapes fixed",
        expected_gain=None,
    )]


__all__ = ["CODE_CHANNELS_LAST", "CODE_CUDNN_BENCHMARK", "check_channels_last",
           "check_cudnn_benchmark", "is_conv_net", "layout_ms"]

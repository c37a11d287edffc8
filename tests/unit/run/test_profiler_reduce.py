"""The profiler window's in-process reduction, on synthetic events (no GPU needed)."""

from __future__ import annotations

import pytest

from gpudoctor.collectors.profiler_window import Event, reduce_events


def _dev(name: str, start: float, dur: float, nbytes: int | None = None) -> Event:
    return Event(name=name, on_device=True, start_us=start, dur_us=dur, nbytes=nbytes)


def _cpu(name: str, start: float, dur: float, thread: int = 1) -> Event:
    return Event(name=name, on_device=False, start_us=start, dur_us=dur, thread=thread)


def test_reduce_window() -> None:
    events = [
        _cpu("aten::linear", 0, 100),  # contains addmm: self time 100 - 60
        _cpu("aten::addmm", 10, 60),
        _cpu("cudaLaunchKernel", 20, 5),
        _cpu("cudaLaunchKernel", 30, 5),
        _cpu("cudaStreamSynchronize", 200, 50),
        _cpu("cudaMemcpyAsync", 300, 4),
        _dev("sm90_gemm_kernel", 100, 200),
        _dev("elementwise_kernel", 250, 8),  # overlaps the gemm: union counts it once
        _dev("ncclDevKernel_AllReduce_Sum_f32", 280, 100),  # 20 us under compute
        _dev("Memcpy HtoD (Pageable -> Device)", 500, 50, nbytes=4096),
        _dev("Memcpy HtoD (Pinned -> Device)", 600, 10, nbytes=None),
        _dev("Memset (Device)", 700, 1),
    ]
    s = reduce_events(events, rank=1, first_step=10, last_step=14, wall_ms=1.0)
    # device union: [100, 380] + [500, 550] + [600, 610] + [700, 701] = 280 + 50 + 10 + 1
    assert s.gpu_busy_ms == pytest.approx(0.341)
    # on the GPU timeline, first device event to last: [100, 701]
    assert s.gpu_span_ms == pytest.approx(0.601)
    assert s.gpu_busy_frac == pytest.approx(0.341 / 0.601)
    # compute kernels [100, 300] + [250, 258]: 200 us; copies [500, 550] + [600, 610], no kernel over them
    assert s.kernel_ms == pytest.approx(0.2) and s.memcpy_ms == pytest.approx(0.06)
    assert s.kernel_count == 3 and s.kernels_under_10us_frac == pytest.approx(1 / 3)
    # durations 8, 100, 200 us: median 100; statistics.quantiles' inclusive p90 = 100 + 0.8 * 100
    assert s.kernel_us_p50 == 100 and s.kernel_us_p90 == pytest.approx(180)
    assert s.nccl_ms == pytest.approx(0.1) and s.nccl_overlap_frac == pytest.approx(0.2)
    assert (s.sync_calls, s.sync_ms, s.launch_count) == (1, pytest.approx(0.05), 2)
    assert [(o.name, o.count, o.total_us) for o in s.top_ops] == [("aten::addmm", 1, 60.0), ("aten::linear", 1, 40.0)]
    assert [k.name for k in s.top_kernels] == ["sm90_gemm_kernel", "ncclDevKernel_AllReduce_Sum_f32", "elementwise_kernel"]
    assert s.top_kernels[1].kind == "nccl"
    assert [(m.kind, m.pinned, m.count, m.bytes) for m in s.memcpy] == [("HtoD", False, 1, 4096), ("HtoD", True, 1, None)]
    assert (s.rank, s.first_step, s.last_step, s.note) == (1, 10, 14, "")


def test_cpu_only_window_says_why_gpu_figures_are_missing() -> None:
    s = reduce_events([_cpu("aten::mm", 0, 10)], rank=0, first_step=3, last_step=7, wall_ms=2.0)
    assert s.gpu_busy_frac is None and s.gpu_busy_ms is None and s.kernel_us_p50 is None
    assert s.nccl_overlap_frac is None and "CPU run" in s.note


def test_gpu_figures_come_from_the_gpu_timeline_not_host_wall_time() -> None:
    # a GPU-bound host runs ahead: 1 ms of host time in the window, 5 ms of GPU work in it;
    # nothing is clipped to the host's wall time
    s = reduce_events([_dev("k", 0, 4000), _dev("k", 4500, 1000)], rank=0, first_step=0,
                      last_step=0, wall_ms=1.0)
    assert s.gpu_busy_ms == pytest.approx(5.0) and s.gpu_span_ms == pytest.approx(5.5)
    assert s.gpu_busy_frac == pytest.approx(5.0 / 5.5)


def _flop(name: str, flops: float) -> Event:
    return Event(name=name, on_device=False, start_us=0, dur_us=1, flops=flops)


def test_window_flops_count_convolution_backward_twice_more() -> None:
    # the profiler counts FLOPs of forward convolutions only; a training step's backward runs a
    # data-gradient and a weight-gradient convolution of the same size; mm ops of both passes
    # are counted where they run
    events = [_flop("aten::conv2d", 10.0), _flop("aten::convolution_backward", 0.0),
              _flop("aten::addmm", 3.0), _flop("aten::mm", 6.0), _flop("aten::mul", 100.0)]
    s = reduce_events(events, rank=0, first_step=0, last_step=0, wall_ms=1.0)
    assert s.flops == pytest.approx(3 * 10.0 + 3.0 + 6.0)  # element-wise mul is not a model FLOP
    inference = reduce_events(events[:1], rank=0, first_step=0, last_step=0, wall_ms=1.0)
    assert inference.flops == pytest.approx(10.0)
    assert reduce_events([_cpu("aten::relu", 0, 1)], rank=0, first_step=0, last_step=0,
                         wall_ms=1.0).flops is None


def test_gloo_collectives_count_as_communication_once_per_instant() -> None:
    # gloo runs its collectives as CPU ops on its worker threads; two in flight at once
    # (threads 2 and 3) count once: [100, 400] + [900, 1000] = 400 us
    events = [
        _cpu("c10d::allreduce_", 90, 5, thread=1),  # the enqueue on the main thread: not the wait
        _cpu("gloo:all_reduce", 100, 200, thread=2),
        _cpu("gloo:all_reduce", 250, 150, thread=3),
        _cpu("gloo:broadcast", 900, 100, thread=2),
        _cpu("aten::mm", 0, 50, thread=1),
    ]
    s = reduce_events(events, rank=0, first_step=10, last_step=14, wall_ms=2.0)
    assert s.gloo_ms == pytest.approx(0.4)
    assert s.nccl_ms == 0.0 and s.nccl_overlap_frac is None
    assert "gloo:all_reduce" in [o.name for o in s.top_ops]  # still listed among the CPU ops


def test_no_gloo_ops_no_gloo_time() -> None:
    s = reduce_events([_cpu("aten::mm", 0, 10), _dev("ncclDevKernel_AllReduce", 0, 10)],
                      rank=0, first_step=0, last_step=0, wall_ms=1.0)
    assert s.gloo_ms == 0.0 and s.nccl_ms == pytest.approx(0.01)


class _FakeKinetoEvent:
    """A torch 2.11-like ``_KinetoEvent``: no ``activity_type``, microsecond getters."""

    def __init__(self, name: str, device: str, start: float, dur: float) -> None:
        self._name, self._device, self._start, self._dur = name, device, start, dur

    def name(self) -> str:
        return self._name

    def device_type(self) -> str:
        return f"DeviceType.{self._device}"

    def start_us(self) -> float:
        return self._start

    def duration_us(self) -> float:
        return self._dur


def test_gpu_copies_of_annotations_are_not_gpu_work() -> None:
    # An optimizer step of tiny kernels with gaps: its annotation, drawn again on the GPU
    # timeline, spans the gaps; counted as a kernel it made a launch-bound GPU look 90% busy.
    from types import SimpleNamespace

    from gpudoctor.collectors.profiler_window import _kineto_events

    raw = [
        _FakeKinetoEvent("Optimizer.step#AdamW.step", "CPU", 0, 1000),
        _FakeKinetoEvent("cudaLaunchKernel", "CPU", 10, 5),
        _FakeKinetoEvent("Optimizer.step#AdamW.step", "CUDA", 100, 900),
        *[_FakeKinetoEvent("elementwise_kernel", "CUDA", 100 + 100 * i, 2) for i in range(9)],
    ]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: raw)))
    events = _kineto_events(prof)
    assert [e.name for e in events if e.on_device] == ["elementwise_kernel"] * 9
    s = reduce_events(events, rank=0, first_step=0, last_step=0, wall_ms=1.0)
    assert s.kernel_count == 9 and s.gpu_busy_ms == pytest.approx(0.018)
    assert "Optimizer.step#AdamW.step" not in [k.name for k in s.top_kernels]


def test_the_allocators_cuda_calls_are_timed_apart() -> None:
    events = [_cpu("cudaMalloc", 0, 30), _cpu("cudaFree", 40, 50), _cpu("cudaLaunchKernel", 100, 5),
              _cpu("aten::empty", 110, 4), _dev("elementwise_kernel", 120, 8)]
    s = reduce_events(events, rank=0, first_step=0, last_step=0, wall_ms=1.0)
    assert (s.alloc_calls, s.alloc_ms) == (2, pytest.approx(0.08))
    assert [o.name for o in s.top_ops] == ["aten::empty"]  # runtime calls are not CPU ops

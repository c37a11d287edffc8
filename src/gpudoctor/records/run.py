"""What a diagnosed run was: the command, each rank's training setup, and the profiler window.

Written by ``gpudoctor run`` (collectors) into a run directory; read by analysis and the report.
"""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class LoaderConfig:
    """Settings of one ``torch.utils.data.DataLoader`` the script iterated."""

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    batch_size: int | None
    drop_last: bool
    sampler: str  # class name: RandomSampler, DistributedSampler, ...
    dataset: str  # class name of the dataset
    dataset_len: int | None = None
    set_epoch_called: bool | None = None  # DistributedSampler only: was set_epoch ever called
    epochs_started: int = 0  # how many times iteration over the loader began
    batches: int = 0  # batches the script took from it (added in gpudoctor 0.2)
    pin_memory_device: str = ""


@record
class DdpConfig:
    """Settings of a ``DistributedDataParallel`` wrapper (or FSDP, ``kind="fsdp"``).

    ``gpudoctor run`` also reports the single-process ``torch.nn.DataParallel`` as ``kind="dp"``
    (with its ``device_ids``): one process driving several GPUs, slower than DDP.
    """

    kind: str  # "ddp" | "fsdp" | "fsdp2" | "dp"
    device_ids: tuple[int, ...] = ()
    bucket_cap_mb: float | None = None
    find_unused_parameters: bool | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    comm_hook: str = ""
    # dist.all_reduce calls the probes saw on the DDP model's own parameter gradients, outside
    # backward (DDP reduced them already), the bytes they carried, and the step of the first one
    manual_grad_allreduces: int = 0
    manual_grad_allreduce_bytes: int = 0
    manual_grad_allreduce_first_step: int | None = None


@record
class RankConfig:
    """How one rank trained: device, precision, flags, model and loaders, as observed in-process."""

    rank: int
    local_rank: int
    world_size: int
    pid: int
    device: str  # "cuda:0", "cpu"
    device_name: str = ""
    cuda_device_index: int | None = None  # the CUDA device this rank actually used
    torch_version: str = ""
    cuda_version: str | None = None
    cudnn_version: int | None = None
    cudnn_benchmark: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str = ""
    autocast_dtypes: tuple[str, ...] = ()  # dtypes seen in autocast regions ("bfloat16", ...)
    grad_scaler: bool = False
    compiled: bool = False
    channels_last: bool | None = None
    ddp: DdpConfig | None = None
    param_count: int | None = None
    param_dtypes: tuple[str, ...] = ()
    optimizer: str = ""  # class name
    optimizer_fused: bool | None = None
    optimizer_foreach: bool | None = None
    loaders: tuple[LoaderConfig, ...] = ()
    backend: str = ""  # process-group backend, "" when not distributed
    alloc_conf: str = ""  # PYTORCH_CUDA_ALLOC_CONF as seen by the process
    gpu_total_memory_bytes: int | None = None
    # Added by ``gpudoctor run``: the physical GPU behind ``cuda_device_index`` (its UUID), and
    # CUDA_VISIBLE_DEVICES as the rank saw it — ranks that each see "cuda:0" through their own
    # CUDA_VISIBLE_DEVICES are on different GPUs; the same UUID on two ranks means a shared GPU.
    cuda_device_uuid: str = ""
    cuda_visible_devices: str | None = None
    # Added by ``gpudoctor run``: torch.backends.cudnn.deterministic (slower convolutions when on).
    cudnn_deterministic: bool | None = None
    # Added by ``gpudoctor run``: the CPUs this rank may run on (``os.sched_getaffinity``) and the
    # ranks started on its node (``LOCAL_WORLD_SIZE``): the cores per rank a DataLoader can use.
    usable_cpus: int | None = None
    local_world_size: int | None = None
    # Added by ``gpudoctor run --try``: what each injected knob did, or why it did nothing.
    knob_notes: tuple[str, ...] = ()


@record
class OpStat:
    """One operator or kernel aggregated over the profiler window."""

    name: str
    count: int
    total_us: float
    kind: str = ""  # "kernel", "memcpy", "memset", "nccl", "cpu_op", "sync"


@record
class MemcpyStat:
    """Copies of one kind seen in the profiler window."""

    kind: str  # "HtoD", "DtoH", "DtoD"
    pinned: bool | None  # source/destination pinned ("Pinned"/"Pageable" in the trace)
    count: int
    bytes: int | None
    total_us: float


@record
class WindowSummary:
    """A short ``torch.profiler`` window (by default the last five steps of ``gpudoctor run
    --steps``; steps 10-14 with ``--full``), reduced in-process.

    Replaces a multi-GB trace with the numbers the analysis needs.
    """

    rank: int
    first_step: int
    last_step: int
    wall_ms: float  # host wall time of the window (start to stop of the profiler)
    gpu_busy_ms: float | None  # union of kernel/memcpy intervals on the GPU
    # gpu_busy_ms over the window's span on the GPU timeline (recordings before gpudoctor 0.2:
    # over wall_ms, clipped to 1.0). Analysis reads gpu_busy_ms, not this.
    gpu_busy_frac: float | None
    kernel_count: int = 0
    kernel_us_p50: float | None = None
    kernel_us_p90: float | None = None
    kernels_under_10us_frac: float | None = None
    top_ops: tuple[OpStat, ...] = ()  # CPU-side ops by self time
    top_kernels: tuple[OpStat, ...] = ()
    memcpy: tuple[MemcpyStat, ...] = ()
    sync_calls: int = 0  # cudaDeviceSynchronize / cudaStreamSynchronize / cudaMemcpy (sync)
    sync_ms: float = 0.0
    nccl_ms: float = 0.0
    nccl_overlap_frac: float | None = None  # share of NCCL time overlapped by compute kernels
    # Wall time inside gloo collectives (CPU ops named "gloo:*", run on gloo's worker threads;
    # the union of their spans): gloo's counterpart of ``nccl_ms``, which counts only NCCL kernels.
    gloo_ms: float = 0.0
    launch_count: int = 0  # cudaLaunchKernel (+ variants) calls
    note: str = ""  # why some figure is missing
    # Added in gpudoctor 0.2 (None in older recordings): the GPU timeline of the window.
    gpu_span_ms: float | None = None  # first device event start to last device event end
    kernel_ms: float | None = None  # union of compute kernels (not NCCL, not copies)
    memcpy_ms: float | None = None  # union of copies not overlapped by any kernel
    flops: float | None = None  # matmul/conv FLOPs of the window (profiler with_flops)
    # host time in the caching allocator's CUDA calls (cudaMalloc/cudaFree and async forms)
    alloc_calls: int = 0
    alloc_ms: float = 0.0


@record
class RunManifest:
    """The run as a whole: what was run, how it ended, and where each file is."""

    command: tuple[str, ...]
    started_at: float  # time.time()
    ended_at: float | None = None
    exit_code: int | None = None
    status: str = "running"  # running | completed | stopped | crashed | interrupted | no_steps | timeout | stalled
    world_size: int | None = None
    steps_requested: int | None = None  # --steps N, None with --full
    hostname: str = ""
    gpudoctor_version: str = ""
    python: str = ""
    knobs: tuple[str, ...] = ()  # --try knobs injected into this run
    error: str = ""  # the child's last error lines when it crashed
    ranks: tuple[int, ...] = ()
    # Added by ``gpudoctor run``: why some evidence is missing ("no NVML: ...", "profiler off").
    notes: tuple[str, ...] = ()
    # Added by ``gpudoctor run``: optimizer steps each rank recorded, in ``ranks`` order.
    steps_recorded: tuple[int, ...] = ()
    # Added by ``gpudoctor run``: the profiler window asked for, as (first, last) step, or ().
    profile_window: tuple[int, ...] = ()
    # Added by ``gpudoctor run``: a run stopped by a stall, the first-step timeout or Ctrl-C — the
    # seconds without an optimizer step at that moment, and the stall limit that applied.
    idle_s: float | None = None
    stall_limit_s: float | None = None
    # Added with compile-aware stalls: of ``idle_s``, the seconds some rank spent compiling (not
    # counted against the stall limit; None: no compilation seen since the last step); whether
    # a compilation was in progress when it was stopped; and ``--compile-timeout`` when that
    # limit (seconds compiling without a step) is what stopped it.
    compile_s: float | None = None
    compiling: bool = False
    compile_limit_s: float | None = None

"""``gpudoctor check --cluster``: what each rank of a torchrun job saw, and the comparison.

Every rank builds a :class:`RankEnv` (its frozen environment, GPU clocks, network interfaces,
whether it reached the rendezvous store); rank 0 gathers them, the pure analysis
(:mod:`gpudoctor.analysis.cluster_diff`, :mod:`gpudoctor.analysis.cluster_net`) turns them into a
:class:`ClusterReport`.
"""

from __future__ import annotations

from gpudoctor.records.base import record
from gpudoctor.records.env import CheckResult, FrozenEnv, Verdict

KIND_CLUSTER = "gpudoctor.cluster-check"


@record
class GpuClocks:
    """One GPU's clock and power settings as NVML reports them (MHz, W); ``None``: not read."""

    index: int
    name: str = ""
    sm_max_mhz: int | None = None
    sm_app_mhz: int | None = None
    mem_max_mhz: int | None = None
    power_limit_w: float | None = None


@record
class NetInterface:
    """One network interface (``psutil.net_if_addrs`` / ``net_if_stats``).

    ``addresses`` are its IPv4/IPv6 addresses (an interface without one is not usable by NCCL's
    socket transport); ``speed_mbps`` is what the link reports (0 or ``None``: unknown).
    """

    name: str
    addresses: tuple[str, ...] = ()
    up: bool | None = None
    speed_mbps: int | None = None


@record
class IbPort:
    """One port of an InfiniBand/RoCE adapter (``/sys/class/infiniband/DEV/ports/N``).

    ``state`` as the kernel words it (``"ACTIVE"``, ``"DOWN"``, ``"INIT"``); ``rate_gbps`` the
    link rate in Gb/s (``"400 Gb/sec (4X NDR)"`` -> 400); ``link_layer`` ``"InfiniBand"`` or
    ``"Ethernet"`` (RoCE).
    """

    device: str
    port: int
    state: str = ""
    rate_gbps: float | None = None
    link_layer: str = ""


@record
class StoreProbe:
    """A TCP connection to the rendezvous store (``MASTER_ADDR:MASTER_PORT``) with a timeout."""

    addr: str
    port: str
    ok: bool
    ms: float | None = None
    error: str = ""
    timeout_s: float = 0.0


@record
class RankEnv:
    """What one rank of ``check --cluster`` observed about its node.

    ``node`` is torchrun's ``GROUP_RANK`` (the agent's node rank); ``frozen`` is the record
    ``check --freeze`` writes, so nodes are compared exactly as ``--against`` compares.
    """

    rank: int
    local_rank: int
    node: int
    hostname: str
    frozen: FrozenEnv
    clocks: tuple[GpuClocks, ...] = ()
    clocks_error: str = ""
    interfaces: tuple[NetInterface, ...] = ()
    ib_devices: tuple[str, ...] = ()  # /sys/class/infiniband: the HCAs NCCL_IB_HCA names
    ib_ports: tuple[IbPort, ...] = ()
    store: StoreProbe | None = None


@record
class NodeDifference:
    """One field that differs between ranks: each distinct value with the nodes/ranks holding it.

    ``values`` pairs a label (``"node 1"``, ``"nodes 0, 2"``, ``"node 1 rank 3"``) with its value,
    in the order of the first rank holding it. ``changes`` is env_diff's marking: what the
    difference can change (``"numerics and speed"``, ``"numerics"``, ``"speed"`` or ``""``).
    """

    field: str
    values: tuple[tuple[str, str], ...]
    verdict: Verdict
    why: str
    changes: str = ""


@record
class CollectiveFigure:
    """An all-reduce over a group of ranks, its bus bandwidth at the largest size measured.

    ``scope`` is ``"between nodes"`` (one rank per node) or ``"within node N"``.
    """

    scope: str
    ranks: tuple[int, ...]
    backend: str
    device: str
    size_bytes: int = 0
    busbw_gbs: float | None = None
    algbw_gbs: float | None = None
    time_ms: float | None = None
    error: str = ""


@record
class NodeSummary:
    """One node of the job: its number, host and ranks."""

    node: int
    hostname: str
    ranks: tuple[int, ...]


@record
class ClusterReport:
    """Everything ``check --cluster`` prints: the nodes, what differs, the checks, the verdict."""

    nodes: tuple[NodeSummary, ...]
    differences: tuple[NodeDifference, ...]
    checks: tuple[CheckResult, ...]
    collectives: tuple[CollectiveFigure, ...] = ()
    summary: str = ""
    duration_ms: float = 0.0

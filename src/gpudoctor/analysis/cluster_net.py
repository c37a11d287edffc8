"""``check --cluster``: the rendezvous store, the interfaces NCCL would use, the all-reduces.

NCCL's socket transport picks its interfaces by ``NCCL_SOCKET_IFNAME`` (a comma list of name
prefixes; ``^`` first excludes them, ``=`` first matches names exactly); unset, it takes ``ib*``
interfaces, else every interface but ``docker*`` and ``lo``, else ``docker*``, else ``lo``
(NCCL's environment-variable documentation). Only interfaces with an IP address count.
``NCCL_IB_HCA`` names InfiniBand/RoCE adapters (``mlx5_0:1``; the same ``^`` and ``=``);
``GLOO_SOCKET_IFNAME`` names exact interfaces for gloo. A name that matches nothing on a node is
a failure: NCCL stops with "no socket interface found" or, for an HCA, quietly falls back to
sockets. Pure: records in, rows out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudoctor.analysis.cluster_diff import compare, label, nodes_of
from gpudoctor.records.cluster import (
    ClusterReport,
    CollectiveFigure,
    IbPort,
    NetInterface,
    NodeSummary,
    RankEnv,
)
from gpudoctor.records.env import CheckResult, Layer, Verdict

NCCL_DEFAULT = "NCCL_SOCKET_IFNAME unset: NCCL takes ib*, else all but docker* and lo, else lo"
# Judged only for NCCL: gloo on a CPU measures the host's sockets and threads, not the network.
# One rank a node drives about one adapter port; NCCL over IB/RoCE with GPUDirect RDMA reaches most
# of its line rate, TCP sockets or a staged copy through host memory reach a fraction: below half
# names the likely cause.
IB_LINE_FRACTION = 0.5
# A node whose all-reduce runs below half the best node's has a problem (a broken link, throttled
# GPUs, a disabled transport): identical nodes run the same NCCL algorithm over the same links,
# and half is far outside the run-to-run noise of a timed collective.
SLOW_NODE_FRACTION = 0.5


def parse_names(spec: str) -> tuple[bool, bool, tuple[str, ...]]:
    """``"^=docker0,lo"`` -> (exclude, exact, names); an HCA's ``:port`` is dropped."""
    exclude = spec.startswith("^")
    rest = spec[1:] if exclude else spec
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    return exclude, exact, tuple(p.split(":")[0].strip() for p in rest.split(",") if p.strip())


def _match(name: str, entry: str, exact: bool) -> bool:
    return name == entry if exact else name.startswith(entry)


def _pick(names: Sequence[str], spec: str) -> list[str]:
    exclude, exact, entries = parse_names(spec)
    return [n for n in names if any(_match(n, e, exact) for e in entries) != exclude]


def nccl_interfaces(interfaces: Sequence[NetInterface], spec: str | None) -> tuple[list[str], list[str]]:
    """The interfaces NCCL's socket transport would use, and the named entries matching none."""
    usable = [i.name for i in interfaces if i.addresses]
    if spec:
        exclude, exact, entries = parse_names(spec)
        missing = [] if exclude else [e for e in entries if not any(_match(n, e, exact) for n in usable)]
        return _pick(usable, spec), missing
    for choice in ("ib", "^docker,lo", "docker", "lo"):
        picked = _pick(usable, choice)
        if picked:
            return picked, []
    return [], []


def _iface_words(interfaces: Sequence[NetInterface], names: Sequence[str]) -> str:
    by_name = {i.name: i for i in interfaces}
    words = []
    for name in names:
        i = by_name[name]
        state = "up" if i.up else "down" if i.up is False else "state unknown"
        speed = f", {i.speed_mbps / 1000:g} Gb/s" if i.speed_mbps else ""
        words.append(f"{name} ({state}{speed})")
    return ", ".join(words)


def socket_row(env: RankEnv, multi_host: bool) -> CheckResult:
    """Which interfaces NCCL's socket transport would use on this rank's node."""
    spec = env.frozen.env.get("NCCL_SOCKET_IFNAME")
    picked, missing = nccl_interfaces(env.interfaces, spec)
    usable = [i.name for i in env.interfaces if i.addresses]
    how = f"NCCL_SOCKET_IFNAME={spec}" if spec else NCCL_DEFAULT
    have = f"interfaces with an address: {', '.join(usable) or 'none'}"
    if missing or not picked:
        what = f"names {', '.join(missing)}, matching no interface" if missing else "matches no interface"
        return _row("nccl.socket_ifname", Verdict.FAIL, f"{how} {what} ({have})",
                    "set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes, "
                    "the same name on every node (`ip -br addr`)")
    evidence = f"NCCL would use {_iface_words(env.interfaces, picked)}; {how}"
    if multi_host and all(n.startswith("lo") for n in picked):
        return _row("nccl.socket_ifname", Verdict.FAIL, evidence + " - loopback does not reach another host",
                    "set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes")
    down = [n for n in picked if next(i for i in env.interfaces if i.name == n).up is False]
    if down:
        return _row("nccl.socket_ifname", Verdict.WARN, evidence + f"; {', '.join(down)} is down",
                    "exclude the down interface (NCCL_SOCKET_IFNAME) or bring it up")
    return _row("nccl.socket_ifname", Verdict.PASS, evidence)


def ib_ports_used(env: RankEnv) -> list[IbPort]:
    """The adapter ports NCCL's IB transport may use: those NCCL_IB_HCA selects (all unset);
    none with NCCL_IB_DISABLE."""
    if env.frozen.env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        return []
    spec = env.frozen.env.get("NCCL_IB_HCA")
    devices = set(_pick(env.ib_devices, spec)) if spec else set(env.ib_devices)
    return [p for p in env.ib_ports if p.device in devices]


def _port_words(ports: Sequence[IbPort]) -> str:
    return ", ".join(f"{p.device}:{p.port} ({p.state or 'state ?'}"
                     + (f", {p.rate_gbps:g} Gb/s" if p.rate_gbps else "")
                     + (f" {p.link_layer}" if p.link_layer else "") + ")" for p in ports)


def ib_row(env: RankEnv) -> CheckResult:
    """``NCCL_IB_HCA`` / ``NCCL_IB_DISABLE`` against the adapters in /sys/class/infiniband."""
    spec = env.frozen.env.get("NCCL_IB_HCA")
    disabled = env.frozen.env.get("NCCL_IB_DISABLE", "0") not in ("", "0")
    have = ", ".join(env.ib_devices) or "none"
    if spec:
        exclude, exact, entries = parse_names(spec)
        missing = [] if exclude else [e for e in entries if not any(_match(d, e, exact) for d in env.ib_devices)]
        if missing:
            return _row("nccl.ib_hca", Verdict.FAIL,
                        f"NCCL_IB_HCA={spec} names {', '.join(missing)}, not an adapter here (adapters: {have})",
                        "name adapters from `ls /sys/class/infiniband` (`ibv_devinfo`), or unset it; "
                        "NCCL otherwise falls back to TCP sockets between nodes")
    if disabled and env.ib_devices:
        return _row("nccl.ib_hca", Verdict.WARN,
                    f"NCCL_IB_DISABLE={env.frozen.env['NCCL_IB_DISABLE']} with adapters {have}: "
                    "traffic between nodes goes over TCP sockets", "unset NCCL_IB_DISABLE")
    if not env.ib_devices:
        return _row("nccl.ib_hca", Verdict.PASS, "no InfiniBand/RoCE adapter (/sys/class/infiniband): "
                    "NCCL uses TCP sockets between nodes")
    used = ib_ports_used(env)
    selected = f"; NCCL_IB_HCA={spec}" if spec else ""
    if used and not any(p.state == "ACTIVE" for p in used):
        return _row("nccl.ib_hca", Verdict.WARN,
                    f"no ACTIVE port on the adapters NCCL would use: {_port_words(used)}{selected}; "
                    "NCCL falls back to TCP sockets between nodes",
                    "check the cables and the subnet manager (`ibstat`), or name an adapter whose port is ACTIVE")
    return _row("nccl.ib_hca", Verdict.PASS,
                (f"adapter ports {_port_words(used)}" if used else f"adapters {have}") + selected)


def gloo_row(env: RankEnv) -> CheckResult | None:
    """``GLOO_SOCKET_IFNAME`` (exact names) against the interfaces; ``None`` when unset."""
    spec = env.frozen.env.get("GLOO_SOCKET_IFNAME")
    if not spec:
        return None
    names = {i.name for i in env.interfaces}
    missing = [n for n in spec.split(",") if n and n not in names]
    if missing:
        return _row("gloo.socket_ifname", Verdict.FAIL,
                    f"GLOO_SOCKET_IFNAME={spec} names {', '.join(missing)}, not an interface here",
                    "set it to an interface that exists on every node, or unset it")
    return _row("gloo.socket_ifname", Verdict.PASS, f"GLOO_SOCKET_IFNAME={spec} exists")


def store_row(ranks: Sequence[RankEnv]) -> CheckResult:
    """Every rank connected to MASTER_ADDR:MASTER_PORT (a rank that did not never got here)."""
    probes = [(e.rank, e.store) for e in ranks if e.store is not None]
    if not probes:
        return _row("rendezvous.store", Verdict.SKIP, "MASTER_ADDR/MASTER_PORT not set")
    rank, slowest = max(probes, key=lambda p: p[1].ms or 0.0)
    where = f"{slowest.addr}:{slowest.port}"
    failed = [r for r, p in probes if not p.ok]
    if failed:
        return _row("rendezvous.store", Verdict.FAIL, f"ranks {failed} could not connect to {where}",
                    "open the port on node 0's firewall and check MASTER_ADDR resolves on every node")
    return _row("rendezvous.store", Verdict.PASS,
                f"all {len(probes)} ranks connected to the store at {where} (slowest {slowest.ms:.1f} ms, rank {rank})")


def _gbs(figure: CollectiveFigure) -> str:
    return f"{figure.busbw_gbs:.2f} GB/s" if figure.busbw_gbs is not None else "?"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:g} MiB"


def _between_row(f: CollectiveFigure, port: IbPort | None) -> CheckResult:
    """One rank a node uses one GPU, so NCCL drives about one adapter port: judged against the
    fastest active port NCCL may use (NCCL only; gloo measures the CPU's sockets)."""
    words = (f"{len(f.ranks)} nodes, one rank each, {f.backend} on {f.device}: bus bandwidth "
             f"{_gbs(f)} at {_size(f.size_bytes)} ({f.time_ms:.2f} ms)")
    if f.backend == "gloo":
        return _row("allreduce.between_nodes", Verdict.PASS,
                    words + " - gloo figures, far below what NCCL reaches on GPUs")
    if port is None or not port.rate_gbps or f.busbw_gbs is None:
        return _row("allreduce.between_nodes", Verdict.PASS, words)
    line = port.rate_gbps / 8.0
    words += f" = {f.busbw_gbs / line:.2f}× one {port.rate_gbps:g} Gb/s port ({line:g} GB/s, {port.device})"
    if f.busbw_gbs < IB_LINE_FRACTION * line:
        return _row("allreduce.between_nodes", Verdict.WARN, words,
                    "NCCL is likely on TCP sockets or without GPUDirect RDMA: rerun with NCCL_DEBUG=INFO "
                    "and look for 'NET/IB' (not 'NET/Socket') and 'GDRDMA'")
    return _row("allreduce.between_nodes", Verdict.PASS, words)


def collective_rows(figures: Sequence[CollectiveFigure], nodes: Sequence[NodeSummary],
                    port: IbPort | None = None) -> list[CheckResult]:
    """All-reduce bus bandwidth between nodes (against ``port``, the fastest active adapter port
    NCCL may use on node 0), and within each node for comparison."""
    between = [f for f in figures if f.scope == "between nodes"]
    within = [f for f in figures if f.scope != "between nodes"]
    rows = []
    if not between:
        rows.append(_row("allreduce.between_nodes", Verdict.SKIP, "one node: nothing between nodes to measure"))
    for f in between:
        if f.error:
            rows.append(_row("allreduce.between_nodes", Verdict.FAIL, f"ranks {list(f.ranks)}: {f.error}",
                             "see nccl.socket_ifname / nccl.ib_hca; rerun with NCCL_DEBUG=INFO"))
            continue
        rows.append(_between_row(f, port))
    ok = [f for f in within if not f.error and f.busbw_gbs]
    for f in within:
        if f.error:
            rows.append(_row("allreduce.within_node", Verdict.FAIL, f"{f.scope}: {f.error}"))
    if not within:
        rows.append(_row("allreduce.within_node", Verdict.SKIP, "one process per node: nothing within a "
                         "node to compare with (start --nproc-per-node = GPUs per node to measure it)"))
    if ok:
        best = max(f.busbw_gbs for f in ok)
        words = "; ".join(f"{f.scope} ({len(f.ranks)} ranks) {_gbs(f)}" for f in ok)
        good = [f for f in between if not f.error and f.busbw_gbs]
        if good:
            words += f"; between nodes is {good[0].busbw_gbs / best:.2g}× the best node's"
        slow = [f for f in ok if f.backend == "nccl" and f.busbw_gbs < SLOW_NODE_FRACTION * best]
        if slow:
            rows.append(_row("allreduce.within_node", Verdict.WARN, words,
                             f"{', '.join(f.scope for f in slow)} below half the best node's: check its "
                             "GPU links (`nvidia-smi topo -m`), clocks and NCCL_P2P_* settings"))
        else:
            rows.append(_row("allreduce.within_node", Verdict.PASS, words + (
                " (gloo figures)" if ok[0].backend == "gloo" else "")))
    return rows


def _row(name: str, verdict: Verdict, evidence: str, fix: str = "") -> CheckResult:
    return CheckResult(layer=Layer.COMMUNICATION, name=name, verdict=verdict, evidence=evidence,
                       fix=fix if verdict in (Verdict.WARN, Verdict.FAIL) else "")


def per_node_rows(ranks: Sequence[RankEnv], nodes: Sequence[NodeSummary]) -> list[CheckResult]:
    """The interface rows of every node, identical rows merged under one label of nodes."""
    hosts = {n.hostname for n in nodes}
    first = {n.node: next(e for e in ranks if e.rank == n.ranks[0]) for n in nodes}
    grouped: dict[tuple, list[int]] = {}
    for node, env in first.items():
        rows = [socket_row(env, len(hosts) > 1), ib_row(env), gloo_row(env)]
        for row in rows:
            if row is not None:
                grouped.setdefault((row.name, row.verdict, row.evidence, row.fix), []).append(node)
    out = []
    names = ["nccl.socket_ifname", "nccl.ib_hca", "gloo.socket_ifname"]
    for (name, verdict, evidence, fix), node_ids in sorted(grouped.items(), key=lambda g: names.index(g[0][0])):
        ranks_of = [r for n in nodes if n.node in node_ids for r in n.ranks]
        out.append(CheckResult(layer=Layer.COMMUNICATION, name=name, verdict=verdict,
                               evidence=f"{label(ranks_of, nodes)}: {evidence}", fix=fix))
    return out


def cluster_report(ranks: Sequence[RankEnv], figures: Sequence[CollectiveFigure],
                   duration_ms: float = 0.0) -> ClusterReport:
    """The whole comparison and the checks, with a one-line summary."""
    nodes = nodes_of(ranks)
    differences = compare(ranks)
    first = min(ranks, key=lambda e: e.rank)
    active = [p for p in ib_ports_used(first) if p.state == "ACTIVE" and p.rate_gbps]
    port = max(active, key=lambda p: p.rate_gbps or 0.0, default=None)
    checks = [store_row(ranks), *per_node_rows(ranks, nodes), *collective_rows(figures, nodes, port)]
    marked = sum(1 for d in differences if d.changes)
    failed = sum(1 for c in checks if c.verdict is Verdict.FAIL)
    warned = sum(1 for c in checks if c.verdict is Verdict.WARN)
    summary = (f"{len(nodes)} node(s), {len(ranks)} rank(s): "
               f"{len(differences)} difference(s) between ranks ({marked} can change results or speed); "
               f"{failed} check(s) failed, {warned} warning(s)")
    return ClusterReport(nodes=nodes, differences=differences, checks=tuple(checks),
                         collectives=tuple(figures), summary=summary, duration_ms=duration_ms)

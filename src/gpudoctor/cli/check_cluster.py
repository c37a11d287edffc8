"""``gpudoctor check --cluster``, run on every rank of a torchrun job.

Order on each rank: read the torchrun variables (not under torchrun: a usage error); connect to
the rendezvous store (``MASTER_ADDR:MASTER_PORT``) with a timeout, so an unreachable store is a
clear message rather than a hang; join a gloo process group; record this rank's environment
(:func:`gpudoctor.collectors.cluster.rank_env`) and gather every rank's to all ranks with
``all_gather_object``; time an all-reduce between nodes (one rank per node) and within each node
(:func:`gpudoctor.bench.collectives.measure`: NCCL on GPUs, gloo on the CPU); rank 0 prints the
comparison and every rank exits with rank 0's code (0 nothing to act on, 1 a difference or a
check at or above ``--fail-on``, 2 usage).
"""

from __future__ import annotations

import json
import os
import socket
import time

from gpudoctor.cli.output import EXIT_FINDINGS, FailOn, emit_json, exit_code, fail, stderr_console, stdout_console

STORE_TIMEOUT_S = 30.0  # refused connects are retried this long: the store's host may be starting
CPU_SIZES = (1 << 20, 4 << 20)  # gloo on the CPU: small, the check must stay quick
GPU_SIZES = (64 << 20, 256 << 20)  # NCCL reaches most of its bus bandwidth by 256 MiB
USAGE = ("--cluster runs on every rank of a torchrun job, e.g. on each node: torchrun --nnodes 2 "
         "--nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint NODE0:29500 -m gpudoctor check --cluster")


def _say(message: str) -> None:
    stderr_console().print(message, highlight=False, markup=False)


def _measure(scope: str, group, ranks: list[int], device):
    import torch.distributed as dist

    from gpudoctor.bench.collectives import measure
    from gpudoctor.records.cluster import CollectiveFigure

    backend = str(dist.get_backend(group))
    try:
        result = None
        for size in GPU_SIZES if device.type == "cuda" else CPU_SIZES:
            result = measure("all_reduce", size, quick=True, device=device, group=group)
    except (RuntimeError, ValueError) as exc:
        return CollectiveFigure(scope=scope, ranks=tuple(ranks), backend=backend, device=device.type,
                                error=str(exc).splitlines()[0][:200])
    return CollectiveFigure(scope=scope, ranks=tuple(ranks), backend=backend, device=device.type,
                            size_bytes=result.size_bytes, busbw_gbs=result.median,
                            algbw_gbs=result.algbw_gbs, time_ms=result.time_ms)


def _collectives(me: int, ranks, device) -> list:
    """All-reduce between nodes (one rank each), then within each node; every rank's figures."""
    import torch.distributed as dist

    from gpudoctor.analysis.cluster_diff import nodes_of

    nodes = nodes_of(ranks)
    backend = "nccl" if device.type == "cuda" else "gloo"
    leaders = [n.ranks[0] for n in nodes]
    # every rank creates every group, in the same order, members or not
    between = dist.new_group(leaders, backend=backend) if len(nodes) > 1 else None
    within = {n.node: dist.new_group(list(n.ranks), backend=backend) for n in nodes if len(n.ranks) > 1}
    mine = next(n for n in nodes if me in n.ranks)
    figures = []
    if between is not None and me in leaders:
        figure = _measure("between nodes", between, leaders, device)
        if me == leaders[0]:
            figures.append(figure)
    dist.barrier()
    if mine.node in within:
        figure = _measure(f"within node {mine.node}", within[mine.node], list(mine.ranks), device)
        if me == mine.ranks[0]:
            figures.append(figure)
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, figures)
    return sorted((f for part in everyone for f in part), key=lambda f: (f.scope != "between nodes", f.scope))


def run_cluster(*, timeout_s: float, fail_on: FailOn, json_output: bool) -> int:
    """The whole ``check --cluster`` on this rank; returns the exit code (rank 0's, on all)."""
    from gpudoctor.core.dist import dist_env

    try:
        env = dist_env()
    except ValueError as exc:
        fail(f"{exc}. {USAGE}")
    if not env.is_distributed or not env.master_addr or not env.master_port:
        fail(f"not under torchrun (WORLD_SIZE={os.environ.get('WORLD_SIZE', 'unset')}, "
             f"MASTER_ADDR={env.master_addr or 'unset'}). {USAGE}")
    from gpudoctor.collectors.cluster import probe_store
    from gpudoctor.records.cluster import StoreProbe

    start = time.perf_counter()
    host = socket.gethostname()
    if env.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        # launched without torchrun's agent store: rank 0 opens the store itself when it joins
        store = StoreProbe(addr=env.master_addr, port=env.master_port, ok=True, ms=0.0,
                           error="opened by this rank")
    else:
        store = probe_store(env.master_addr, env.master_port, min(timeout_s, STORE_TIMEOUT_S))
    if not store.ok:
        _say(f"gpudoctor check --cluster: rank {env.rank} on {host} cannot reach the rendezvous store "
             f"at {env.master_addr}:{env.master_port}: {store.error}. Every rank connects there "
             "(node 0's MASTER_ADDR/MASTER_PORT, from --rdzv-endpoint or --master-addr/--master-port): "
             "check that the address resolves and routes from this node and that the port is open.")
        return EXIT_FINDINGS
    return _joined(env, store, host, start, timeout_s=timeout_s, fail_on=fail_on, json_output=json_output)


def _joined(env, store, host: str, start: float, *, timeout_s: float, fail_on: FailOn, json_output: bool) -> int:
    import torch
    import torch.distributed as dist

    from gpudoctor.core.dist import destroy_distributed, init_distributed

    try:
        init_distributed(env, torch.device("cpu"), timeout_s=timeout_s, backend="gloo")
    except (RuntimeError, ValueError) as exc:  # DistStoreError / timeouts are RuntimeErrors
        _say(f"gpudoctor check --cluster: rank {env.rank} on {host} could not join the process group "
             f"within {timeout_s:g} s ({str(exc).splitlines()[0][:300]}): a rank did not start or "
             "cannot reach the store, or the nodes cannot connect to each other (gloo and NCCL open "
             "connections between every pair of nodes on ephemeral ports: a firewall between the "
             "nodes, or GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME on the wrong interface); see the "
             "other nodes' output.")
        return EXIT_FINDINGS
    finished = False
    try:
        code = _compare(env, store, start, timeout_s=timeout_s, fail_on=fail_on, json_output=json_output)
        box = [code]
        dist.broadcast_object_list(box, src=0)
        finished = True
        return int(box[0])
    finally:
        destroy_distributed(synchronize=finished)


def _compare(env, store, start: float, *, timeout_s: float, fail_on: FailOn, json_output: bool) -> int:
    import torch
    import torch.distributed as dist

    from gpudoctor.analysis.cluster_net import cluster_report
    from gpudoctor.collectors.cluster import rank_env
    from gpudoctor.records.base import SCHEMA_VERSION, from_dict, to_dict
    from gpudoctor.records.cluster import KIND_CLUSTER, RankEnv

    mine = rank_env(rank=env.rank, local_rank=env.local_rank, store=store)
    gathered: list = [None] * env.world_size
    # as JSON text, not pickled records: nodes may run different gpudoctor versions
    dist.all_gather_object(gathered, json.dumps(to_dict(mine)))
    ranks = [from_dict(RankEnv, json.loads(text)) for text in gathered]
    use_gpu = torch.cuda.is_available() and env.local_rank < torch.cuda.device_count()
    device = torch.device("cuda", env.local_rank) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    figures = _collectives(env.rank, ranks, device)
    if env.rank != 0:
        return 0  # rank 0 decides, and broadcasts its code
    report = cluster_report(ranks, figures, duration_ms=(time.perf_counter() - start) * 1000.0)
    verdicts = [d.verdict.value for d in report.differences] + [c.verdict.value for c in report.checks]
    if json_output:
        emit_json({"schema_version": SCHEMA_VERSION, "kind": KIND_CLUSTER, "summary": report.summary,
                   "report": report, "ranks": ranks})
    else:
        from gpudoctor.report.cluster_view import render_cluster

        render_cluster(stdout_console(), report)
    return exit_code(verdicts, fail_on=fail_on)

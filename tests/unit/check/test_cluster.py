"""``check --cluster``: the node comparison, the interface rules, the rendering (goldens at 80 and
120 columns) and the store check, without torchrun (tests/distributed starts the real agents)."""

from __future__ import annotations

import dataclasses
import io
import socket
import subprocess
import sys
import threading
import time

import pytest
from cli_runner import env as cli_env
from rich.console import Console

from gpudoctor.analysis.cluster_diff import compare, label, nodes_of, number_list
from gpudoctor.analysis.cluster_net import cluster_report, nccl_interfaces, parse_names
from gpudoctor.analysis.env_diff import freeze
from gpudoctor.collectors.cluster import probe_store, read_ib_ports
from gpudoctor.records.base import from_dict, to_dict
from gpudoctor.records.cluster import (
    CollectiveFigure,
    GpuClocks,
    IbPort,
    NetInterface,
    RankEnv,
    StoreProbe,
)
from gpudoctor.records.env import Verdict
from gpudoctor.report.cluster_view import render_cluster

R = dataclasses.replace
IFACES = (NetInterface(name="lo", addresses=("127.0.0.1",), up=True, speed_mbps=0),
          NetInterface(name="eth0", addresses=("10.0.0.1",), up=True, speed_mbps=100_000),
          NetInterface(name="ib0", addresses=("192.168.0.1",), up=True, speed_mbps=400_000),
          NetInterface(name="docker0", addresses=("172.17.0.1",), up=False, speed_mbps=0))
PORTS = tuple(IbPort(device=f"mlx5_{i}", port=1, state="ACTIVE", rate_gbps=400.0, link_layer="InfiniBand")
              for i in range(2))
H200_CLOCKS = tuple(GpuClocks(index=i, name="NVIDIA H200", sm_max_mhz=1980, sm_app_mhz=1980,
                              mem_max_mhz=3201, power_limit_w=700.0) for i in range(2))


def _rank(facts, rank: int, node: int, *, env: dict | None = None, clocks=H200_CLOCKS,
          interfaces=IFACES, ib=("mlx5_0", "mlx5_1"), ports=PORTS, host: str | None = None) -> RankEnv:
    frozen = freeze(facts)
    frozen = R(frozen, env={**frozen.env, **(env or {})})
    return RankEnv(rank=rank, local_rank=rank % 2, node=node, hostname=host or f"gpu-node-{node}",
                   frozen=frozen, clocks=clocks, interfaces=interfaces, ib_devices=ib, ib_ports=ports,
                   store=StoreProbe(addr="gpu-node-0", port="29500", ok=True, ms=0.4 + rank / 10,
                                    timeout_s=10.0))


def _cluster(facts_factory) -> list[RankEnv]:
    """Three 2-GPU nodes: node 1 plants NCCL_P2P_DISABLE; node 2 has another driver and NCCL,
    H100s at a lower power limit and an NCCL_SOCKET_IFNAME that names no interface; rank 3 alone
    runs with another OMP_NUM_THREADS."""
    ok = facts_factory.healthy(2)
    odd = R(ok, driver=R(ok.driver, version="570.86.15", cuda_version="12.8",
                         gpus=tuple(R(g, name="NVIDIA H100 80GB HBM3") for g in ok.driver.gpus)),
            torch=R(ok.torch, nccl_version="2.21.5"), devices=())
    slow = tuple(R(c, name="NVIDIA H100 80GB HBM3", sm_app_mhz=1755, power_limit_w=500.0)
                 for c in H200_CLOCKS)
    return [_rank(ok, 0, 0), _rank(ok, 1, 0),
            _rank(ok, 2, 1, env={"NCCL_P2P_DISABLE": "1"}),
            _rank(ok, 3, 1, env={"NCCL_P2P_DISABLE": "1", "OMP_NUM_THREADS": "4"}),
            _rank(odd, 4, 2, env={"NCCL_SOCKET_IFNAME": "eth1"}, clocks=slow),
            _rank(odd, 5, 2, env={"NCCL_SOCKET_IFNAME": "eth1"}, clocks=slow)]


FIGURES = (CollectiveFigure(scope="between nodes", ranks=(0, 2, 4), backend="nccl", device="cuda",
                            size_bytes=256 << 20, busbw_gbs=41.2, algbw_gbs=30.9, time_ms=8.69),
           CollectiveFigure(scope="within node 0", ranks=(0, 1), backend="nccl", device="cuda",
                            size_bytes=256 << 20, busbw_gbs=362.0, algbw_gbs=362.0, time_ms=0.74),
           CollectiveFigure(scope="within node 1", ranks=(2, 3), backend="nccl", device="cuda",
                            size_bytes=256 << 20, busbw_gbs=21.5, algbw_gbs=21.5, time_ms=12.5),
           CollectiveFigure(scope="within node 2", ranks=(4, 5), backend="nccl", device="cuda",
                            size_bytes=256 << 20, busbw_gbs=355.0, algbw_gbs=355.0, time_ms=0.76))


def _render(report, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render_cluster(console, report)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_golden_three_nodes(golden, facts_factory, width):
    report = cluster_report(_cluster(facts_factory), FIGURES, duration_ms=6400.0)
    golden(f"console/check_cluster_{width}.txt", _render(report, width))


@pytest.mark.parametrize("width", [80, 120])
def test_golden_two_identical_cpu_nodes(golden, facts_factory, width):
    """What the CPU bar's agents print when nothing is planted: no differences, gloo figures."""
    cpu = facts_factory.cpu_only()
    lo_eth = IFACES[:2]
    ranks = [_rank(cpu, r, r, clocks=(), interfaces=lo_eth, ib=(), ports=(), host="ci") for r in (0, 1)]
    ranks = [R(e, clocks_error="NVML: NVMLError_LibraryNotFound") for e in ranks]
    figures = (CollectiveFigure(scope="between nodes", ranks=(0, 1), backend="gloo", device="cpu",
                                size_bytes=4 << 20, busbw_gbs=1.03, algbw_gbs=1.03, time_ms=4.06),)
    report = cluster_report(ranks, figures, duration_ms=3500.0)
    assert report.differences == ()
    golden(f"console/check_cluster_cpu_{width}.txt", _render(report, width))


def test_differences_are_labelled_by_node_and_marked(facts_factory):
    diffs = {d.field: d for d in compare(_cluster(facts_factory))}
    p2p = diffs["env NCCL_P2P_DISABLE"]
    assert p2p.values == (("nodes 0, 2", "unset"), ("node 1", "1")) and p2p.changes == "speed"
    assert diffs["env OMP_NUM_THREADS"].values == (("nodes 0, 2; node 1 rank 2", "unset"),
                                                   ("node 1 rank 3", "4"))
    assert diffs["NCCL"].values == (("nodes 0, 1", "2.27.7"), ("node 2", "2.21.5"))
    assert diffs["NCCL"].changes == "numerics and speed"
    assert diffs["driver"].changes == "speed" and diffs["gpu"].changes == "numerics and speed"
    assert diffs["GPU clocks"].changes == "speed" and "SM 1755 of 1980 MHz" in diffs["GPU clocks"].values[1][1]
    assert "torch" not in diffs  # the same build everywhere is not a difference


def test_identical_ranks_have_no_differences(facts_factory):
    ok = facts_factory.healthy(2)
    assert compare([_rank(ok, 0, 0), _rank(ok, 1, 1)]) == ()


def test_checks_fail_a_missing_interface_and_warn_a_slow_node(facts_factory):
    report = cluster_report(_cluster(facts_factory), FIGURES)
    by_name: dict[str, list] = {}
    for c in report.checks:
        by_name.setdefault(c.name, []).append(c)
    socket_rows = {c.verdict: c for c in by_name["nccl.socket_ifname"]}
    assert socket_rows[Verdict.FAIL].evidence.startswith("node 2: NCCL_SOCKET_IFNAME=eth1 names eth1")
    assert socket_rows[Verdict.PASS].evidence.startswith("nodes 0, 1: NCCL would use ib0")
    (within,) = by_name["allreduce.within_node"]
    assert within.verdict is Verdict.WARN and "within node 1 below half" in within.fix
    assert by_name["rendezvous.store"][0].verdict is Verdict.PASS


def test_nccl_interface_selection_follows_nccl_rules():
    assert nccl_interfaces(IFACES, None) == (["ib0"], [])  # ib* first
    assert nccl_interfaces(IFACES[:2] + IFACES[3:], None) == (["eth0"], [])  # not docker*, not lo
    assert nccl_interfaces(IFACES[:1], None) == (["lo"], [])  # the last resort
    assert nccl_interfaces(IFACES, "^ib,lo") == (["eth0", "docker0"], [])
    assert nccl_interfaces(IFACES, "=eth") == ([], ["eth"])  # exact: eth is not eth0
    assert nccl_interfaces(IFACES, "eth,enp") == (["eth0"], ["enp"])
    assert parse_names("^=mlx5_0:1,mlx5_1") == (True, True, ("mlx5_0", "mlx5_1"))
    no_ip = (NetInterface(name="eth0", addresses=(), up=True),)
    assert nccl_interfaces(no_ip, "eth0") == ([], ["eth0"])  # an interface without an address


def test_ib_hca_and_disable_rules(facts_factory):
    ok = facts_factory.healthy(2)
    rows = lambda env: [c for c in cluster_report([_rank(ok, 0, 0, env=env), _rank(ok, 1, 1, env=env)],
                                                  ()).checks if c.name == "nccl.ib_hca"]
    (bad,) = rows({"NCCL_IB_HCA": "mlx5_2:1"})
    assert bad.verdict is Verdict.FAIL and "mlx5_2" in bad.evidence and bad.fix
    (off,) = rows({"NCCL_IB_DISABLE": "1"})
    assert off.verdict is Verdict.WARN and "TCP sockets" in off.evidence
    (fine,) = rows({"NCCL_IB_HCA": "=mlx5_0"})
    assert fine.verdict is Verdict.PASS


def test_loopback_only_fails_across_hosts(facts_factory):
    ok = facts_factory.healthy(2)
    ranks = [_rank(ok, r, r, interfaces=IFACES[:1], ib=(), ports=()) for r in (0, 1)]
    (row,) = [c for c in cluster_report(ranks, ()).checks if c.name == "nccl.socket_ifname"]
    assert row.verdict is Verdict.FAIL and "loopback" in row.evidence


def test_labels_and_number_lists():
    nodes = nodes_of([RankEnv(rank=r, local_rank=r % 2, node=r // 2, hostname="h", frozen=None)
                      for r in range(6)])  # frozen unused by nodes_of
    assert label([0, 1, 2, 3, 4, 5], nodes) == "nodes 0-2"
    assert label([0, 1, 5], nodes) == "node 0; node 2 rank 5"
    assert number_list([0, 1, 2, 4, 6, 7]) == "0-2, 4, 6, 7"


def test_rank_env_round_trips_through_json(facts_factory):
    env = _cluster(facts_factory)[4]
    assert from_dict(RankEnv, to_dict(env)) == env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens


def test_store_probe_reports_refused_and_unresolvable_quickly():
    start = time.perf_counter()
    refused = probe_store("127.0.0.1", str(_closed_port()), 2.0)
    assert not refused.ok and "nothing listens" in refused.error
    bad = probe_store("no-such-host.invalid", "29500", 2.0)
    assert not bad.ok and "does not resolve" in bad.error
    assert not probe_store("127.0.0.1", "http", 2.0).ok
    assert time.perf_counter() - start < 10


def test_store_probe_waits_for_a_store_that_starts_late():
    port = _closed_port()
    server = socket.socket()

    def listen_later():
        time.sleep(1.0)
        server.bind(("127.0.0.1", port))
        server.listen()

    thread = threading.Thread(target=listen_later)
    thread.start()
    try:
        probe = probe_store("127.0.0.1", str(port), 10.0)
    finally:
        thread.join()
        server.close()
    assert probe.ok and probe.ms >= 900.0


def test_cli_says_the_store_is_unreachable_and_exits_1(tmp_path):
    """A rank whose MASTER_ADDR:MASTER_PORT has no store gets a clear message, not a hang."""
    env = {**cli_env(), "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_closed_port())}
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--cluster", "--timeout", "5"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "cannot reach the rendezvous store at 127.0.0.1" in proc.stderr
    assert "port is open" in proc.stderr.replace("\n", " ")


def test_cli_outside_torchrun_is_a_usage_error(tmp_path):
    env = {k: v for k, v in cli_env().items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--cluster"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "torchrun" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--cluster", "--freeze", "x.json"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "x.json").exists()


def test_between_nodes_is_judged_against_one_active_port(facts_factory):
    ok = facts_factory.healthy(2)
    ranks = [_rank(ok, 0, 0), _rank(ok, 1, 1)]
    slow = CollectiveFigure(scope="between nodes", ranks=(0, 1), backend="nccl", device="cuda",
                            size_bytes=256 << 20, busbw_gbs=9.8, algbw_gbs=9.8, time_ms=27.4)
    (row,) = [c for c in cluster_report(ranks, (slow,)).checks if c.name == "allreduce.between_nodes"]
    assert row.verdict is Verdict.WARN and "0.20× one 400 Gb/s port (50 GB/s, mlx5_0)" in row.evidence
    assert "NET/Socket" in row.fix
    (fast,) = [c for c in cluster_report(ranks, FIGURES[:1]).checks if c.name == "allreduce.between_nodes"]
    assert fast.verdict is Verdict.PASS and "0.82× one 400 Gb/s port" in fast.evidence
    off = [_rank(ok, r, r, env={"NCCL_IB_DISABLE": "1"}) for r in (0, 1)]  # sockets: no port to judge by
    (row,) = [c for c in cluster_report(off, (slow,)).checks if c.name == "allreduce.between_nodes"]
    assert row.verdict is Verdict.PASS and "port" not in row.evidence


def test_ports_down_warn(facts_factory):
    ok = facts_factory.healthy(2)
    down = tuple(R(p, state="DOWN") for p in PORTS)
    (row,) = [c for c in cluster_report([_rank(ok, r, r, ports=down) for r in (0, 1)], ()).checks
              if c.name == "nccl.ib_hca"]
    assert row.verdict is Verdict.WARN and "no ACTIVE port" in row.evidence and "ibstat" in row.fix


def test_ib_ports_are_read_from_sysfs(tmp_path):
    for dev, state, rate, layer in (("mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
                                    ("mlx5_1", "1: DOWN", "10 Gb/sec (4X SDR)", "Ethernet")):
        port = tmp_path / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text(rate + "\n")
        (port / "link_layer").write_text(layer + "\n")
    assert read_ib_ports(tmp_path) == (
        IbPort(device="mlx5_0", port=1, state="ACTIVE", rate_gbps=400.0, link_layer="InfiniBand"),
        IbPort(device="mlx5_1", port=1, state="DOWN", rate_gbps=10.0, link_layer="Ethernet"))
    assert read_ib_ports(tmp_path / "absent") == ()

"""Each rule, fed a machine with one thing broken: the right layer fails and the fix says how."""

from __future__ import annotations

import dataclasses

import pytest

from gpudoctor.analysis.env_rules import check_env
from gpudoctor.analysis.env_visible import parse_visible
from gpudoctor.records.env import (
    DeviceNode,
    DriverFacts,
    GpuMemoryUser,
    NcclProbe,
    ProbeRun,
    Verdict,
)

R = dataclasses.replace


def rows(facts):
    return {r.name: r for r in check_env(facts).results}


def test_healthy_two_gpus_pass_every_row(facts_factory):
    report = check_env(facts_factory.healthy(2))
    bad = [(r.name, r.verdict, r.evidence) for r in report.results if r.verdict is not Verdict.PASS]
    assert bad == []
    assert report.worst is Verdict.PASS
    assert report.summary.startswith("PASS: 2 GPU(s) ready (NVIDIA H200)")
    names = [r.name for r in report.results]
    for expected in ("driver.loaded", "driver.cuda", "torch.build", "devices.permissions",
                     "gpu0.context", "gpu1.matmul", "gpu1.conv", "p2p", "nccl.allreduce", "host.shm"):
        assert expected in names
    matmul = rows(facts_factory.healthy(2))["gpu0.matmul"].evidence
    assert "107× faster" in matmul  # 310 ms CPU / 2.9 ms GPU
    assert "69% of the 989.4 datasheet peak" in matmul  # 2·4096³ / 0.2 ms = 687 TFLOP/s


def test_one_gpu_skips_communication(facts_factory):
    r = rows(facts_factory.healthy(1))
    assert r["p2p"].verdict is Verdict.SKIP and r["nccl.allreduce"].verdict is Verdict.SKIP
    assert check_env(facts_factory.healthy(1)).worst is Verdict.PASS


def test_cpu_machine_says_driver_layer_missing_and_cpu_training(facts_factory):
    report = check_env(facts_factory.cpu_only())
    r = {x.name: x for x in report.results}
    assert r["driver.loaded"].verdict is Verdict.FAIL
    assert "docker run --gpus all" in r["driver.loaded"].fix
    assert r["torch.cuda_available"].verdict is Verdict.FAIL
    assert r["gpu.context"].verdict is Verdict.SKIP
    assert report.summary.startswith("FAIL at the driver layer (driver.loaded)")
    assert "training would run on the CPU" in report.summary


def test_gpu_on_pci_bus_without_driver_says_install(facts_factory):
    f = facts_factory.cpu_only()
    f = R(f, driver=R(f.driver, pci_nvidia_gpus=2))
    r = rows(f)
    assert "NVIDIA GPUs on the PCI bus: 2" in r["driver.loaded"].evidence
    assert "install the NVIDIA driver" in r["driver.loaded"].fix
    assert r["devices.files"].verdict is Verdict.FAIL  # GPUs exist, so the files should too


@pytest.mark.parametrize("error,words", [
    ("NVML: NVMLError_DriverNotLoaded: Driver Not Loaded", "sudo modprobe nvidia"),
    ("NVML: Failed to initialize NVML: Driver/library version mismatch", "reboot"),
])
def test_driver_error_words_pick_the_fix(facts_factory, error, words):
    f = facts_factory.cpu_only()
    f = R(f, driver=DriverFacts(source="none", error=error, pci_nvidia_gpus=1))
    assert words in rows(f)["driver.loaded"].fix


def test_cpu_build_of_torch_fails_with_the_cuda_variant_to_install(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, torch=R(f.torch, version="2.11.0+cpu", cuda=None, cuda_available=False,
                     device_count=0), devices=())
    r = rows(f)
    assert r["torch.build"].verdict is Verdict.FAIL
    assert "CPU-only build" in r["torch.build"].evidence
    assert "cu130" in r["torch.build"].fix and "http" not in r["torch.build"].fix
    assert r["driver.cuda"].verdict is Verdict.SKIP
    assert "training would run on the CPU" in check_env(f).summary


def test_old_driver_with_newer_major_runtime_fails(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, driver=R(f.driver, version="535.104.05", cuda_version="12.2"))
    row = rows(f)["driver.cuda"]
    assert row.verdict is Verdict.FAIL
    assert "supports CUDA ≤ 12.2" in row.evidence and "13.0" in row.evidence
    assert "≥ 580" in row.fix and "cu121" in row.fix


def test_same_major_newer_minor_runtime_warns(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, driver=R(f.driver, version="535.104.05", cuda_version="12.2"),
          torch=R(f.torch, version="2.7.1+cu128", cuda="12.8"))
    row = rows(f)["driver.cuda"]
    assert row.verdict is Verdict.WARN and "minor-version compatibility" in row.evidence


def test_driver_without_cuda_banner_uses_the_branch_table(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, driver=R(f.driver, source="nvidia-smi", version="470.82.01", cuda_version=None))
    assert rows(f)["driver.cuda"].verdict is Verdict.FAIL
    f = R(f, driver=R(f.driver, version="580.95.05"))
    assert rows(f)["driver.cuda"].verdict is Verdict.PASS


def _cu118(f, version, cuda_version):
    return R(f, driver=R(f.driver, source="nvidia-smi", version=version, cuda_version=cuda_version),
             torch=R(f.torch, version="2.7.1+cu118", cuda="11.8"))


def test_driver_470_runs_cu118_and_is_not_told_to_upgrade_to_450(facts_factory):
    """470 is above 11.x's minor-version-compatibility minimum (450.80.02): a warning whose fix
    is the driver that supports 11.8 in full (520.61.05), never a branch it already exceeds."""
    for cuda_version in ("11.4", None):  # from the banner, and from the driver tables alone
        row = rows(_cu118(facts_factory.healthy(1), "470.82.01", cuda_version))["driver.cuda"]
        assert row.verdict is Verdict.WARN, row
        assert "minor-version compatibility" in row.evidence
        assert "≥ 520.61.05" in row.fix and "≥ 450 " not in row.fix and "branch ≥ 450" not in row.fix


def test_driver_below_the_minor_version_minimum_fails(facts_factory):
    for cuda_version in ("11.0", None):
        row = rows(_cu118(facts_factory.healthy(1), "450.36.06", cuda_version))["driver.cuda"]
        assert row.verdict is Verdict.FAIL, row
        assert "≥ 520.61.05" in row.fix and "≥ 450.80.02" in row.fix


def test_driver_at_the_release_driver_passes_without_a_banner(facts_factory):
    row = rows(_cu118(facts_factory.healthy(1), "525.60.13", None))["driver.cuda"]
    assert row.verdict is Verdict.PASS and "520.61.05" in row.evidence


def test_driver_tables_are_consistent():
    from gpudoctor.analysis.cuda_drivers import MIN_DRIVER_MVC, RELEASE_DRIVER, driver_at_least
    from gpudoctor.analysis.env_rules import TORCH_CUDA_TAGS
    from gpudoctor.analysis.env_text import version_tuple

    assert set(TORCH_CUDA_TAGS) <= set(RELEASE_DRIVER)  # every wheel we suggest has a row
    ordered = sorted(RELEASE_DRIVER, key=version_tuple)
    drivers = [RELEASE_DRIVER[c] for c in ordered]
    assert drivers == sorted(drivers, key=version_tuple)  # newer CUDA never needs an older driver
    for cuda, driver in RELEASE_DRIVER.items():
        major = version_tuple(cuda)[0]
        if version_tuple(cuda)[1] > 0:  # x.0 GA may predate the compatibility minimum
            assert driver_at_least(driver, MIN_DRIVER_MVC[major]), cuda


def test_unreadable_device_files_fail_with_chmod_and_udev(facts_factory):
    f = facts_factory.healthy(1)
    nodes = tuple(DeviceNode(path=n.path, exists=True, readable=False, writable=False,
                             mode="crw-------") for n in f.host.device_nodes)
    r = rows(R(f, host=R(f.host, device_nodes=nodes)))
    assert r["devices.permissions"].verdict is Verdict.FAIL
    assert "crw-------" in r["devices.permissions"].evidence
    assert "chmod a+rw /dev/nvidia*" in r["devices.permissions"].fix
    assert "udev" in r["devices.permissions"].fix


def test_missing_uvm_node_fails(facts_factory):
    f = facts_factory.healthy(1)
    nodes = tuple(n if n.path != "/dev/nvidia-uvm" else DeviceNode(path=n.path, exists=False)
                  for n in f.host.device_nodes)
    row = rows(R(f, host=R(f.host, device_nodes=nodes)))["devices.files"]
    assert row.verdict is Verdict.FAIL and "nvidia-modprobe -u" in row.fix


@pytest.mark.parametrize("value,verdict,words", [
    ("", Verdict.FAIL, "set but empty"),
    ("3", Verdict.FAIL, "only 2 GPUs"),
    ("0,5", Verdict.WARN, "only 0 is visible"),
    ("-1", Verdict.FAIL, "negative index"),
    ("GPU-ffff", Verdict.FAIL, "no GPU has this UUID"),
    ("0,0", Verdict.WARN, "listed twice"),
    ("1", Verdict.PASS, "1 of 2 GPU(s) visible"),
    ("GPU-1aaa", Verdict.PASS, "1 of 2 GPU(s) visible"),
])
def test_cuda_visible_devices(facts_factory, value, verdict, words):
    f = facts_factory.healthy(2)
    f = R(f, host=R(f.host, env={"CUDA_VISIBLE_DEVICES": value}),
          torch=R(f.torch, device_count=1))
    row = rows(f)["devices.visible"]
    assert row.verdict is verdict, row
    assert words in row.evidence


def test_parse_visible_stops_at_first_bad_entry():
    assert parse_visible("0,1,7,2", [], 4) == (["0", "1"], "7 (there are only 4 GPUs: 0..3)")
    assert parse_visible("0, 1", [], None) == (["0", "1"], "")


def test_mixed_gpus_without_pci_order_warn(facts_factory):
    f = facts_factory.healthy(2)
    gpus = (f.driver.gpus[0], R(f.driver.gpus[1], name="NVIDIA L4"))
    row = rows(R(f, driver=R(f.driver, gpus=gpus)))["devices.visible"]
    assert row.verdict is Verdict.WARN and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in row.fix


def test_probe_hung_on_a_gpu_fails_that_gpu_and_keeps_the_rest(facts_factory):
    f = facts_factory.healthy(2)
    f = R(f, devices=f.devices[:1], p2p=None, nccl=None,
          probe=ProbeRun(status="timeout", timeout_s=20.0,
                         stage="context, allocation and compute on GPU 1"))
    r = rows(f)
    assert r["gpu0.matmul"].verdict is Verdict.PASS
    assert r["gpu1.context"].verdict is Verdict.FAIL
    assert "no answer within 20 s" in r["gpu1.context"].evidence
    assert "fuser -v /dev/nvidia*" in r["gpu1.context"].fix
    assert r["p2p"].verdict is Verdict.SKIP
    assert check_env(f).summary.startswith("FAIL at the context layer")


def test_probe_hung_in_nccl_fails_the_allreduce(facts_factory):
    f = facts_factory.healthy(2)
    f = R(f, nccl=None, probe=ProbeRun(status="timeout", timeout_s=30.0,
                                       stage="2-process NCCL all-reduce"))
    row = rows(f)["nccl.allreduce"]
    assert row.verdict is Verdict.FAIL and "NCCL_DEBUG=INFO" in row.fix


def test_context_error_out_of_memory_points_at_holders(facts_factory):
    f = facts_factory.healthy(1)
    dev = R(f.devices[0], alloc_ok=False, error="OutOfMemoryError: CUDA out of memory.")
    row = rows(R(f, devices=(dev,)))["gpu0.context"]
    assert row.verdict is Verdict.FAIL and "--query-compute-apps" in row.fix
    assert "training would run on the CPU" in check_env(R(f, devices=(dev,))).summary


def test_memory_held_by_other_processes_warns(facts_factory):
    f = facts_factory.healthy(1)
    dev = R(f.devices[0], free_memory_bytes=40 * 1024**3)
    users = (GpuMemoryUser(gpu_index=0, pid=4242, used_bytes=100 * 1024**3, process_name="python"),)
    row = rows(R(f, devices=(dev,), driver=R(f.driver, memory_users=users)))["gpu0.memory"]
    assert row.verdict is Verdict.WARN
    assert "pid 4242 python 100.0 GiB" in row.evidence and "fuser" in row.fix


def test_wrong_matmul_fails_and_names_tf32_override(facts_factory):
    f = facts_factory.healthy(1)
    dev = R(f.devices[0], fp32_rel_err=2e-3)
    r = rows(R(f, devices=(dev,)))["gpu0.matmul"]
    assert r.verdict is Verdict.FAIL and "ECC" in r.fix
    f2 = R(f, devices=(dev,), host=R(f.host, env={"NVIDIA_TF32_OVERRIDE": "1"}))
    assert "NVIDIA_TF32_OVERRIDE" in rows(f2)["gpu0.matmul"].fix


def test_slow_gpu_warns(facts_factory):
    f = facts_factory.healthy(1)
    dev = R(f.devices[0], fp32_ms=80.0)
    row = rows(R(f, devices=(dev,)))["gpu0.matmul"]
    assert row.verdict is Verdict.WARN and "less than 10×" in row.evidence


def test_build_without_kernels_for_the_gpu_fails(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, torch=R(f.torch, arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86")))
    row = rows(f)["gpu0.arch"]
    assert row.verdict is Verdict.FAIL and "no kernel image" in row.evidence
    f = R(f, torch=R(f.torch, arch_list=("sm_80", "compute_80")))  # PTX JIT covers sm_90
    assert rows(f)["gpu0.arch"].verdict is Verdict.PASS


def test_gpu_without_bf16_warns(facts_factory):
    f = facts_factory.healthy(1)
    dev = R(f.devices[0], name="Tesla T4", capability=(7, 5), bf16_supported=False, bf16_ms=None,
            bf16_rel_err=None, spec_bf16_tflops=None)
    row = rows(R(f, devices=(dev,)))["gpu0.bf16_tf32"]
    assert row.verdict is Verdict.WARN and "GradScaler" in row.fix


@pytest.mark.parametrize("nccl,words", [
    (NcclProbe(status="wrong_sum", expected=3.0, got=2.0), "expected 3"),
    (NcclProbe(status="failed", error="rank exited with 1: ncclSystemError"), "ncclSystemError"),
    (NcclProbe(status="timeout", error="the all-reduce did not finish within 30 s"), "30 s"),
])
def test_nccl_failures(facts_factory, nccl, words):
    row = rows(R(facts_factory.healthy(2), nccl=nccl))["nccl.allreduce"]
    assert row.verdict is Verdict.FAIL and words in row.evidence
    assert "NCCL_IB_DISABLE=1" in row.fix and "NCCL_P2P_DISABLE=1" in row.fix


def test_missing_p2p_warns_and_p2p_disable_without_need_warns(facts_factory):
    f = facts_factory.healthy(2)
    assert rows(R(f, p2p=((False, False), (False, False))))["p2p"].verdict is Verdict.WARN
    f2 = R(f, host=R(f.host, env={"NCCL_P2P_DISABLE": "1"}))
    assert rows(f2)["dist.env"].verdict is Verdict.WARN


def test_stray_launcher_variables_warn(facts_factory):
    f = facts_factory.healthy(1)
    row = rows(R(f, host=R(f.host, env={"NODE_RANK": "1"})))["dist.env"]
    assert row.verdict is Verdict.WARN and "NODE_RANK=1" in row.evidence


def test_small_shm_warns_with_docker_fix(facts_factory):
    f = facts_factory.healthy(1)
    row = rows(R(f, host=R(f.host, shm_total_bytes=64 * 1024**2)))["host.shm"]
    assert row.verdict is Verdict.WARN and "64.0 MiB" in row.evidence and "--shm-size" in row.fix


def test_few_cpus_and_little_ram_warn(facts_factory):
    f = facts_factory.healthy(2)
    host = R(f.host, usable_cpus=2, cgroup_memory_limit_bytes=2 * 1024**3)
    r = rows(R(f, host=host))
    assert r["host.cpu"].verdict is Verdict.WARN
    assert r["host.ram"].verdict is Verdict.WARN and "container limit 2.0 GiB" in r["host.ram"].evidence


def test_two_torch_installs_warn(facts_factory):
    f = facts_factory.healthy(1)
    host = R(f.host, torch_installs=("2.11.0 at /usr/lib", "2.4.0 at /home/u/.local/lib"))
    row = rows(R(f, host=host))["torch.installs"]
    assert row.verdict is Verdict.WARN and "pip uninstall torch" in row.fix


def test_torch_import_failure(facts_factory):
    f = facts_factory.cpu_only()
    f = R(f, torch=None, probe=ProbeRun(status="ok", error="ImportError: libcudnn.so.9: cannot open"))
    row = rows(f)["torch.build"]
    assert row.verdict is Verdict.FAIL and "libcudnn.so.9" in row.evidence


def test_torch_not_installed_names_the_extra(facts_factory):
    """gpudoctor's core install has no torch: the row says so and how to add it, not 'reinstall'."""
    f = facts_factory.cpu_only()
    f = R(f, torch=None, host=R(f.host, torch_installs=()),
          probe=ProbeRun(status="failed", error="ModuleNotFoundError: No module named 'torch'"))
    row = rows(f)["torch.build"]
    assert row.verdict is Verdict.FAIL and "torch is not installed" in row.evidence
    assert "pip install 'gpudoctor[torch]'" in row.fix and "reinstall" not in row.fix


def test_cudnn_not_loading_fails(facts_factory):
    f = facts_factory.healthy(1)
    f = R(f, torch=R(f.torch, cudnn_version=None, cudnn_error="OSError: libcudnn_graph.so.9"))
    assert rows(f)["cudnn"].verdict is Verdict.FAIL


def test_passing_rows_carry_no_fix(facts_factory):
    assert all(r.fix == "" for r in check_env(facts_factory.healthy(2)).results)

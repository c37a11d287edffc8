"""Pure rules for ``gpudoctor check``: :class:`EnvFacts` in, :class:`CheckReport` out.

Each rule reads facts and returns rows (layer, name, verdict, evidence, fix); none touches the
machine. The layers go bottom up: driver → runtime (the torch build) → device files →
context → compute → libraries → communication → host. When a low layer fails, the rows that
depend on it are ``skip`` and say which layer to fix first. The GPU-side rows (context,
compute, communication) live in :mod:`gpudoctor.analysis.env_rules_gpu`.
"""

from __future__ import annotations

import re

from gpudoctor.analysis.cuda_drivers import (
    driver_at_least,
    mvc_minimum,
    release_driver,
    upgrade_text,
)
from gpudoctor.analysis.env_rules_gpu import communication_rows, gpu_rows, usable_gpus
from gpudoctor.analysis.env_text import cuda_tag, cudnn_words, reinstall_torch, row, version_tuple
from gpudoctor.records.env import CheckReport, CheckResult, EnvFacts, Layer, Verdict
from gpudoctor.records.units import GIB, MISSING, human_bytes

L = Layer
# CUDA variants PyTorch publishes wheels for, newest last (suggested when the driver is old).
TORCH_CUDA_TAGS = ("11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0")
SHM_MIN_BYTES = 1 * GIB
RAM_MIN_BYTES = 4 * GIB
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
LAYER_ORDER = tuple(Layer)


def check_env(facts: EnvFacts) -> CheckReport:
    """Judge every fact; the rows come out grouped by layer, bottom layer first."""
    rows = [
        *driver_rows(facts), *runtime_rows(facts), *device_rows(facts), *gpu_rows(facts),
        *library_rows(facts), *communication_rows(facts), *host_rows(facts),
    ]
    rows.sort(key=lambda r: LAYER_ORDER.index(r.layer))  # stable: keeps order within a layer
    return CheckReport(results=tuple(rows), summary=summarize(facts, rows),
                       duration_ms=facts.gathered_ms)


# --- driver ---------------------------------------------------------------------------------

def driver_rows(facts: EnvFacts) -> list[CheckResult]:
    drv = facts.driver
    if drv.source == "none":
        return [_no_driver(facts), row(L.DRIVER, "driver.cuda", Verdict.SKIP,
                                       "no driver to ask which CUDA versions it supports")]
    names = ", ".join(sorted({g.name for g in drv.gpus})) or "no GPUs listed"
    loaded = row(L.DRIVER, "driver.loaded", Verdict.PASS,
                 f"driver {drv.version} (read via {drv.source}); {len(drv.gpus)} GPU(s): {names}")
    if not drv.gpus:
        loaded = row(L.DRIVER, "driver.loaded", Verdict.FAIL,
                     f"driver {drv.version} is loaded but lists no GPU",
                     "check `nvidia-smi -L` and `dmesg | grep -i nvrm` (a GPU that fell off the "
                     "bus needs a reset or reboot); in a container start it with --gpus all")
    return [loaded, _triangle(facts)]


def _no_driver(facts: EnvFacts) -> CheckResult:
    drv = facts.driver
    err = drv.error
    if facts.host.wsl:
        fix = ("WSL2: install the NVIDIA Windows driver (it provides the GPU to WSL); do not "
               "install a Linux driver inside WSL")
    elif re.search(r"version mismatch", err, re.I):
        fix = "the driver was updated but the old kernel module is still loaded: reboot"
    elif re.search(r"DriverNotLoaded|couldn't communicate|could not communicate", err, re.I):
        fix = ("the driver is installed but its kernel module is not loaded: `sudo modprobe "
               "nvidia`; if that fails, reinstall the driver and reboot")
    elif drv.pci_nvidia_gpus == 0:
        fix = ("no NVIDIA GPU is on this machine's PCI bus: use a machine with one; in a "
               "container, start it with `docker run --gpus all` (NVIDIA Container Toolkit)")
    else:
        fix = ("install the NVIDIA driver (Ubuntu: `sudo ubuntu-drivers install`, then reboot); "
               "in a container start it with `docker run --gpus all` (NVIDIA Container Toolkit)")
    pci = "" if drv.pci_nvidia_gpus is None else (
        f"; NVIDIA GPUs on the PCI bus: {drv.pci_nvidia_gpus}")
    return row(L.DRIVER, "driver.loaded", Verdict.FAIL,
               f"no NVIDIA driver answers ({err}){pci}", fix)


def _triangle(facts: EnvFacts) -> CheckResult:
    """Driver's highest CUDA vs the CUDA runtime torch was built with (seed 001 §2.1)."""
    drv, torch = facts.driver, facts.torch
    name = "driver.cuda"
    if torch is None or torch.cuda is None:
        return row(L.DRIVER, name, Verdict.SKIP,
                   f"driver supports CUDA ≤ {drv.cuda_version or MISSING}; torch has no CUDA runtime "
                   "to compare (see runtime layer)")
    need = version_tuple(torch.cuda)
    if drv.cuda_version is None:  # nvidia-smi without a banner: fall back to the driver tables
        minimum, full = mvc_minimum(torch.cuda), release_driver(torch.cuda)
        if minimum is not None and not driver_at_least(drv.version or "0", minimum):
            return row(L.DRIVER, name, Verdict.FAIL,
                       f"driver {drv.version} is older than {minimum}, the minimum for CUDA "
                       f"{need[0]}.x that torch {torch.version} needs", _old_driver_fix(torch.cuda, None))
        if full is not None and not driver_at_least(drv.version or "0", full):
            return row(L.DRIVER, name, Verdict.WARN,
                       f"driver {drv.version} is older than {full}, CUDA {torch.cuda}'s release "
                       f"driver: torch {torch.version} runs through CUDA minor-version "
                       "compatibility, but PTX JIT and some newer features fail",
                       _old_driver_fix(torch.cuda, None))
        if full is None and minimum is None:
            return row(L.DRIVER, name, Verdict.PASS,
                       f"driver {drv.version}; no known minimum for CUDA {torch.cuda} to compare "
                       f"(torch {torch.version})")
        return row(L.DRIVER, name, Verdict.PASS,
                   f"driver {drv.version} ≥ {full or minimum}, enough for CUDA {torch.cuda} "
                   f"(torch {torch.version})")
    have = version_tuple(drv.cuda_version)
    evidence = (f"driver {drv.version} supports CUDA ≤ {drv.cuda_version}; torch {torch.version} "
                f"ships the CUDA {torch.cuda} runtime")
    if need[:2] <= have[:2]:
        return row(L.DRIVER, name, Verdict.PASS, evidence)
    minimum = mvc_minimum(torch.cuda)
    if need[0] > have[0] or (minimum and drv.version and not driver_at_least(drv.version, minimum)):
        return row(L.DRIVER, name, Verdict.FAIL, evidence + ": the driver is too old",
                   _old_driver_fix(torch.cuda, drv.cuda_version))
    return row(L.DRIVER, name, Verdict.WARN,
               evidence + ": runs through CUDA minor-version compatibility, but PTX JIT and "
               "some newer features fail", _old_driver_fix(torch.cuda, drv.cuda_version))


def _old_driver_fix(torch_cuda: str, driver_cuda: str | None) -> str:
    text = upgrade_text(torch_cuda)
    if driver_cuda:
        fits = [t for t in TORCH_CUDA_TAGS if version_tuple(t) <= version_tuple(driver_cuda)]
        if fits:
            text += (f", or use a torch built for CUDA ≤ {driver_cuda}: "
                     + reinstall_torch(cuda_tag(fits[-1])))
    return text


# --- runtime: the torch build ---------------------------------------------------------------

def runtime_rows(facts: EnvFacts) -> list[CheckResult]:
    torch, probe = facts.torch, facts.probe
    rows = []
    if torch is None:
        if not facts.host.torch_installs and "No module named 'torch'" in (probe.error or probe.stderr_tail):
            # gpudoctor's core install: no torch at all, nothing broken
            return [row(L.RUNTIME, "torch.build", Verdict.FAIL,
                        "torch is not installed, so nothing can train here (gpudoctor's core install "
                        "has no torch; lint, explain, monitor, diagnose and report need none)",
                        "pip install 'gpudoctor[torch]' brings the newest CUDA build; for one that fits "
                        f"this driver, install torch from PyTorch's {cuda_tag(_fitting_cuda(facts))} wheel "
                        "index first (pytorch.org's install selector prints the exact command)")]
        if probe.status == "timeout" and probe.stage == "import torch":
            why = f"`import torch` did not finish within {probe.timeout_s:g} s"
        else:
            why = f"torch could not be imported ({probe.error or probe.stderr_tail or probe.status})"
        return [row(L.RUNTIME, "torch.build", Verdict.FAIL, why,
                    f"{reinstall_torch('cu130')} — pick the tag that fits your driver")]
    installs = facts.host.torch_installs
    if len(installs) > 1:
        rows.append(row(L.RUNTIME, "torch.installs", Verdict.WARN,
                        f"{len(installs)} torch installations on sys.path ({'; '.join(installs)}); "
                        f"the one imported is at {torch.path}",
                        "run `pip uninstall torch` until none is left, then install one build"))
    if torch.hip is not None:
        rows.append(row(L.RUNTIME, "torch.build", Verdict.FAIL,
                        f"torch {torch.version} is a ROCm (AMD) build: it cannot drive NVIDIA GPUs",
                        reinstall_torch(cuda_tag(_fitting_cuda(facts)))))
    elif torch.cuda is None:
        rows.append(row(L.RUNTIME, "torch.build", Verdict.FAIL,
                        f"torch {torch.version} is a CPU-only build (torch.version.cuda is None)",
                        reinstall_torch(cuda_tag(_fitting_cuda(facts)))))
    else:
        rows.append(row(L.RUNTIME, "torch.build", Verdict.PASS,
                        f"torch {torch.version}, CUDA runtime {torch.cuda} "
                        f"(wheel variant {cuda_tag(torch.cuda)})"))
    rows.append(_cuda_available(facts))
    rows.extend(_arch_rows(facts))
    return rows


def _fitting_cuda(facts: EnvFacts) -> str:
    drv = facts.driver.cuda_version
    if drv is None:
        return TORCH_CUDA_TAGS[-1]
    fits = [t for t in TORCH_CUDA_TAGS if version_tuple(t) <= version_tuple(drv)]
    return fits[-1] if fits else TORCH_CUDA_TAGS[0]


def _cuda_available(facts: EnvFacts) -> CheckResult:
    torch = facts.torch
    assert torch is not None
    name = "torch.cuda_available"
    if torch.cuda is None:
        return row(L.RUNTIME, name, Verdict.SKIP, "not a CUDA build")
    if torch.cuda_available:
        return row(L.RUNTIME, name, Verdict.PASS,
                   f"torch.cuda.is_available() is True; {torch.device_count} GPU(s) visible")
    reason = torch.cuda_error.split(". ")[0].rstrip(".") or "no reason given"
    if facts.driver.source == "none":
        fix = "fix the driver layer first (see driver.loaded)"
    elif facts.host.env.get("CUDA_VISIBLE_DEVICES") is not None:
        fix = "check devices.visible: CUDA_VISIBLE_DEVICES may hide every GPU"
    else:
        fix = ("check the device-file rows below; then `python -c \"import torch; "
               "torch.cuda.init()\"` prints the full error")
    return row(L.RUNTIME, name, Verdict.FAIL,
               f"torch.cuda.is_available() is False: {reason}; training would run on the CPU", fix)


def _arch_rows(facts: EnvFacts) -> list[CheckResult]:
    """Does the build carry kernels for each GPU ("no kernel image is available" otherwise)?"""
    torch = facts.torch
    assert torch is not None
    rows = []
    for dev in facts.devices:
        if dev.capability is None or not torch.arch_list:
            continue
        major, minor = dev.capability
        sm = major * 10 + minor
        sass = {int(a[3:]) for a in torch.arch_list if a.startswith("sm_") and a[3:].isdigit()}
        ptx = {int(a[8:]) for a in torch.arch_list if a.startswith("compute_") and a[8:].isdigit()}
        # SASS runs on the same major with an equal or higher minor; PTX JIT-compiles upward
        ok = any(s // 10 == major and s <= sm for s in sass) or any(p <= sm for p in ptx)
        archs = " ".join(torch.arch_list)
        if ok:
            rows.append(row(L.RUNTIME, f"gpu{dev.index}.arch", Verdict.PASS,
                            f"{dev.name} is sm_{sm}; the build has kernels for {archs}"))
        else:
            rows.append(row(L.RUNTIME, f"gpu{dev.index}.arch", Verdict.FAIL,
                            f"{dev.name} is sm_{sm} but torch {torch.version} only has kernels for "
                            f"{archs}: \"no kernel image is available for execution\"",
                            "install a torch build whose CUDA supports this GPU (newer GPUs need "
                            "newer CUDA variants, e.g. cu128+ for sm_120)"))
    return rows


# --- device files and visibility ------------------------------------------------------------

def device_rows(facts: EnvFacts) -> list[CheckResult]:
    from gpudoctor.analysis.env_visible import visible_devices_row

    return [*_node_rows(facts), visible_devices_row(facts)]


def _node_rows(facts: EnvFacts) -> list[CheckResult]:
    host = facts.host
    if host.wsl:
        return [row(L.DEVICES, "devices.files", Verdict.PASS,
                    "WSL2: GPUs reach Linux through /dev/dxg, not /dev/nvidia*")]
    present = [n for n in host.device_nodes if n.exists]
    missing = [n.path for n in host.device_nodes if not n.exists]
    gpu_nodes = [n for n in present if re.fullmatch(r"/dev/nvidia\d+", n.path)]
    if not present and facts.driver.source == "none" and facts.driver.pci_nvidia_gpus == 0:
        return [row(L.DEVICES, "devices.files", Verdict.SKIP,
                    "no /dev/nvidia* files, as expected without an NVIDIA GPU"),
                row(L.DEVICES, "devices.permissions", Verdict.SKIP, "no device files")]
    if not present:
        files = row(L.DEVICES, "devices.files", Verdict.FAIL, "no /dev/nvidia* device files",
                    "in a container: start it with `docker run --gpus all` (NVIDIA Container "
                    "Toolkit); on the host: load the driver (`sudo modprobe nvidia`) and create "
                    "the files with `sudo nvidia-modprobe -u -c=0`")
        return [files, row(L.DEVICES, "devices.permissions", Verdict.SKIP, "no device files")]
    if missing or not gpu_nodes:
        gone = ", ".join(missing) if missing else "/dev/nvidia0..N"
        files = row(L.DEVICES, "devices.files", Verdict.FAIL,
                    f"missing: {gone} (present: {', '.join(n.path for n in present)})",
                    "`sudo nvidia-modprobe -u -c=0` creates /dev/nvidia-uvm and /dev/nvidia0 "
                    "(or `sudo modprobe nvidia-uvm`); in Docker pass --gpus all, not single "
                    "--device flags")
    else:
        files = row(L.DEVICES, "devices.files", Verdict.PASS,
                    f"{len(present)} files: {', '.join(n.path for n in present)}")
    denied = [n for n in present if not (n.readable and n.writable)]
    if denied:
        perms = row(L.DEVICES, "devices.permissions", Verdict.FAIL,
                    "this user may not read and write " +
                    ", ".join(f"{n.path} ({n.mode})" for n in denied),
                    "temporary: `sudo chmod a+rw /dev/nvidia*`; permanent: a udev rule "
                    "(KERNEL==\"nvidia*\", MODE=\"0666\") or join the owning group "
                    "(`sudo usermod -aG video $USER`, then log in again); in Docker: --gpus all")
    else:
        perms = row(L.DEVICES, "devices.permissions", Verdict.PASS,
                    f"read and write on all {len(present)} ({present[0].mode} on {present[0].path})")
    return [files, perms]


# --- libraries ------------------------------------------------------------------------------

def library_rows(facts: EnvFacts) -> list[CheckResult]:
    torch = facts.torch
    if torch is None or torch.cuda is None:
        return [row(L.LIBRARIES, "cudnn", Verdict.SKIP, "no CUDA build of torch"),
                row(L.LIBRARIES, "nccl", Verdict.SKIP, "no CUDA build of torch")]
    rows = []
    if torch.cudnn_version is None:
        rows.append(row(L.LIBRARIES, "cudnn", Verdict.FAIL,
                        f"cuDNN does not load ({torch.cudnn_error or 'torch reports no version'})",
                        "reinstall torch (its nvidia-cudnn wheel is missing or shadowed by another "
                        "libcudnn on LD_LIBRARY_PATH)"))
    elif not torch.cudnn_enabled:
        rows.append(row(L.LIBRARIES, "cudnn", Verdict.WARN,
                        f"cuDNN {cudnn_words(torch.cudnn_version)} loads but torch.backends.cudnn.enabled is "
                        "False: convolutions take slow fallback paths",
                        "remove `torch.backends.cudnn.enabled = False` from the code"))
    else:
        rows.append(row(L.LIBRARIES, "cudnn", Verdict.PASS,
                        f"cuDNN {cudnn_words(torch.cudnn_version)} loads; torch.backends.cudnn.enabled is True"))
    if torch.nccl_version is None:
        rows.append(row(L.LIBRARIES, "nccl", Verdict.WARN,
                        f"NCCL does not load ({torch.nccl_error or 'no version'}): multi-GPU "
                        "training cannot use the nccl backend",
                        "reinstall torch (the nvidia-nccl wheel is missing or shadowed)"))
    else:
        rows.append(row(L.LIBRARIES, "nccl", Verdict.PASS, f"NCCL {torch.nccl_version} loads"))
    return rows


# --- host -----------------------------------------------------------------------------------

def host_rows(facts: EnvFacts) -> list[CheckResult]:
    host = facts.host
    rows = []
    if host.shm_total_bytes is None:
        rows.append(row(L.HOST, "host.shm", Verdict.WARN, "/dev/shm is missing",
                        "DataLoader workers and NCCL need shared memory: mount a tmpfs at /dev/shm"))
    elif host.shm_total_bytes < SHM_MIN_BYTES:
        rows.append(row(L.HOST, "host.shm", Verdict.WARN,
                        f"/dev/shm is {human_bytes(host.shm_total_bytes)}: DataLoader workers die with "
                        "\"bus error\" / \"unable to write to file\" once batches outgrow it",
                        "`docker run --shm-size=16g` (or --ipc=host); Kubernetes: mount an "
                        "emptyDir with medium: Memory at /dev/shm"))
    else:
        rows.append(row(L.HOST, "host.shm", Verdict.PASS,
                        f"/dev/shm {human_bytes(host.shm_total_bytes)} ({human_bytes(host.shm_free_bytes)} free)"))
    gpus = max(1, usable_gpus(facts))
    cpus = host.usable_cpus or host.cpu_count
    if cpus is None:
        rows.append(row(L.HOST, "host.cpu", Verdict.WARN, "CPU count unknown"))
    elif cpus < 2 * gpus and usable_gpus(facts) > 0:
        rows.append(row(L.HOST, "host.cpu", Verdict.WARN,
                        f"{cpus} usable CPUs for {gpus} GPU(s): DataLoader workers cannot keep "
                        "the GPUs fed", "ask for more CPUs (docker --cpus, Slurm --cpus-per-task)"))
    else:
        per_gpu = (f": up to {max(1, cpus // gpus)} DataLoader workers per GPU"
                   if usable_gpus(facts) else "")
        rows.append(row(L.HOST, "host.cpu", Verdict.PASS,
                        f"{cpus} usable CPUs ({host.cpu_count} online){per_gpu}"))
    rows.append(_ram_row(facts))
    return rows


def _ram_row(facts: EnvFacts) -> CheckResult:
    host = facts.host
    if host.ram_total_bytes is None:
        return row(L.HOST, "host.ram", Verdict.WARN, "RAM unknown (psutil unavailable)")
    available = host.ram_available_bytes or 0
    limit = host.cgroup_memory_limit_bytes
    text = f"{human_bytes(host.ram_total_bytes)} RAM, {human_bytes(available)} available"
    if limit is not None and limit < host.ram_total_bytes:
        text += f"; container limit {human_bytes(limit)}"
        available = min(available, limit)
    if available < RAM_MIN_BYTES:
        return row(L.HOST, "host.ram", Verdict.WARN, text + ": loaders and checkpoints may be "
                   "killed by the OOM killer", "free memory or raise the container's memory limit")
    return row(L.HOST, "host.ram", Verdict.PASS, text)


# --- the one-line verdict -------------------------------------------------------------------

def summarize(facts: EnvFacts, rows: list[CheckResult]) -> str:
    counts = {v: sum(r.verdict is v for r in rows) for v in Verdict}
    tally = (f"{counts[Verdict.PASS]} pass, {counts[Verdict.WARN]} warn, "
             f"{counts[Verdict.FAIL]} fail, {counts[Verdict.SKIP]} skip")
    usable = usable_gpus(facts)
    fails = [r for r in rows if r.verdict is Verdict.FAIL]
    if fails:
        first = min(fails, key=lambda r: LAYER_ORDER.index(r.layer))
        where = (f"FAIL at the {first.layer.value} layer ({first.name})")
        then = (" — training would run on the CPU" if usable == 0
                else f" — {usable} GPU(s) usable for single-GPU work")
        return f"{where}{then}; {tally}"
    names = sorted({d.name for d in facts.devices if d.context_ok})
    label = ", ".join(names)
    head = "PASS" if not counts[Verdict.WARN] else "PASS with warnings"
    return f"{head}: {usable} GPU(s) ready ({label}); {tally}"

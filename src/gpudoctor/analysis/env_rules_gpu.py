"""Rules for the GPU side of ``gpudoctor check``: context, allocation, memory, compute
(matmul vs CPU, cuDNN convolution, bf16/TF32) and communication (P2P, NCCL all-reduce)."""

from __future__ import annotations

import re

from gpudoctor.analysis.env_text import row
from gpudoctor.records.units import GIB, MIB, MISSING, human_bytes
from gpudoctor.records.env import CheckResult, EnvFacts, GpuProbe, Layer, Verdict

L = Layer
FP32_TOL = 1e-4    # GPU vs CPU fp32 product of 4096² randn: ~1e-6 expected (summation order)
BF16_TOL = 2e-2    # bf16 output rounding alone gives ~3e-3
CONV_TOL = 1e-3
MIN_SPEEDUP = 10.0  # seed 001 §1.3: a GPU should beat the CPU by an order of magnitude
MIN_PEAK_FRACTION = 0.2
BUSY_FRACTION = 0.10  # memory held by others above this share of a GPU is worth a warning
BUSY_MIN_BYTES = 2 * GIB  # ...and above our own context's size, so our probe never triggers it
HANG_FIX = ("a CUDA call hung: look for leftover processes holding the GPU with "
            "`sudo fuser -v /dev/nvidia*` and end them; check `dmesg | grep -i xid` for GPU "
            "errors; restart nvidia-persistenced or reset the GPU (`sudo nvidia-smi -r -i N`)")
NCCL_FIX = ("rerun with NCCL_DEBUG=INFO to see the failing step; if it hangs in P2P, try "
            "NCCL_P2P_DISABLE=1; without InfiniBand set NCCL_IB_DISABLE=1; in Docker use "
            "--ipc=host or a large --shm-size (NCCL uses /dev/shm)")


def usable_gpus(facts: EnvFacts) -> int:
    """GPUs on which a context, an allocation and a matmul all worked."""
    return sum(d.context_ok and d.alloc_ok and not d.matmul_error for d in facts.devices)


def _hung_gpu(facts: EnvFacts) -> int | None:
    if facts.probe.status not in ("timeout", "crashed"):
        return None
    match = re.search(r"on GPU (\d+)$", facts.probe.stage)
    return int(match.group(1)) if match else None


def gpu_rows(facts: EnvFacts) -> list[CheckResult]:
    torch, probe = facts.torch, facts.probe
    if torch is None or not torch.cuda_available:
        return [row(L.CONTEXT, "gpu.context", Verdict.SKIP,
                    "CUDA is not available to torch (see runtime layer): no GPU to open")]
    rows: list[CheckResult] = []
    hung = _hung_gpu(facts)
    if probe.status != "ok" and hung is None:
        what = (f"hung for {probe.timeout_s:g} s and was killed" if probe.status == "timeout"
                else f"crashed (exit code {probe.returncode})")
        rows.append(row(L.CONTEXT, "gpu.probe", Verdict.FAIL,
                        f"the probe subprocess {what} during: {probe.stage or MISSING}"
                        + (f"; stderr: {probe.stderr_tail.splitlines()[-1]}" if probe.stderr_tail else ""),
                        HANG_FIX))
    done = {d.index for d in facts.devices}
    for dev in facts.devices:
        rows.extend(_device_rows(facts, dev))
    for index in range(torch.device_count):
        if index in done:
            continue
        if index == hung:
            what = ("hung" if probe.status == "timeout" else "crashed the probe") + (
                f" (no answer within {probe.timeout_s:g} s)" if probe.status == "timeout" else "")
            tail = probe.stderr_tail.splitlines()[-1] if probe.stderr_tail else ""
            rows.append(row(L.CONTEXT, f"gpu{index}.context", Verdict.FAIL,
                            f"context creation / allocation on GPU {index} {what}"
                            + (f": {tail}" if tail else ""), HANG_FIX))
        else:
            rows.append(row(L.CONTEXT, f"gpu{index}.context", Verdict.SKIP,
                            "not reached: the probe stopped on an earlier GPU"))
    return rows


def _device_rows(facts: EnvFacts, dev: GpuProbe) -> list[CheckResult]:
    p = f"gpu{dev.index}"
    if not (dev.context_ok and dev.alloc_ok):
        err = dev.error or "unknown error"
        if re.search(r"out of memory", err, re.I):
            fix = ("the GPU's memory is taken: list holders with `nvidia-smi --query-compute-apps="
                   "pid,used_memory --format=csv`; leftover contexts: `sudo fuser -v /dev/nvidia*`")
        elif re.search(r"busy or unavailable|exclusive", err, re.I):
            fix = ("the GPU is in an exclusive compute mode and another process owns it: "
                   "`nvidia-smi -q -d COMPUTE`; `sudo nvidia-smi -c DEFAULT -i N` to share it")
        else:
            fix = HANG_FIX
        stage = "allocation" if dev.context_ok else "context creation"
        return [row(L.CONTEXT, f"{p}.context", Verdict.FAIL,
                    f"{dev.name or 'GPU'}: {stage} failed: {err}", fix)]
    rows = [row(L.CONTEXT, f"{p}.context", Verdict.PASS,
                f"{dev.name}: context in {dev.context_ms:.0f} ms; a 1000×1000 float32 allocation works"),
            _memory_row(facts, dev)]
    return rows + _compute_rows(facts, dev)


def _memory_row(facts: EnvFacts, dev: GpuProbe) -> CheckResult:
    name = f"gpu{dev.index}.memory"
    total, free = dev.total_memory_bytes, dev.free_memory_bytes
    if total is None or free is None:
        return row(L.CONTEXT, name, Verdict.WARN, "free/total memory unknown")
    used = total - free
    text = f"{human_bytes(free)} free of {human_bytes(total)}"
    users = facts.driver.memory_users
    if used > max(BUSY_FRACTION * total, BUSY_MIN_BYTES):
        who = ", ".join(f"pid {u.pid} {u.process_name or MISSING} {human_bytes(u.used_bytes)} "
                        f"on GPU {u.gpu_index}" for u in users[:4]) or "no process visible from here (another container "\
                                                "or a leftover context)"
        return row(L.CONTEXT, name, Verdict.WARN, f"{text}: {human_bytes(used)} already in use ({who})",
                   "stop those processes or pick a free GPU with CUDA_VISIBLE_DEVICES; list "
                   "them with `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`; "
                   "leftover contexts: `sudo fuser -v /dev/nvidia*`")
    others = f"; other processes on the GPUs: {len(users)}" if users else "; no other processes"
    return row(L.CONTEXT, name, Verdict.PASS, text + others)


def _compute_rows(facts: EnvFacts, dev: GpuProbe) -> list[CheckResult]:
    p = f"gpu{dev.index}"
    rows = [_matmul_row(facts, dev)]
    if dev.conv_ok is None:
        rows.append(row(L.COMPUTE, f"{p}.conv", Verdict.SKIP, "not run"))
    elif not dev.conv_ok or (dev.conv_rel_err or 0.0) > CONV_TOL:
        why = dev.conv_error or f"relative error {dev.conv_rel_err:.1e} > {CONV_TOL:g}"
        rows.append(row(L.COMPUTE, f"{p}.conv", Verdict.FAIL, f"cuDNN conv2d: {why}",
                        "reinstall torch so its cuDNN matches its CUDA; check for a libcudnn on "
                        "LD_LIBRARY_PATH shadowing torch's own"))
    else:
        rows.append(row(L.COMPUTE, f"{p}.conv", Verdict.PASS,
                        f"cuDNN conv2d (8×16×32×32, 3×3) matches the CPU "
                        f"(relative error {dev.conv_rel_err:.1e})"))
    rows.append(_precision_row(facts, dev))
    return rows


def _tflops(n: int, ms: float | None) -> float | None:
    return None if not ms else 2 * n**3 / (ms / 1000.0) / 1e12


def _matmul_row(facts: EnvFacts, dev: GpuProbe) -> CheckResult:
    name, n = f"gpu{dev.index}.matmul", dev.matmul_n
    if dev.matmul_error:
        return row(L.COMPUTE, name, Verdict.FAIL, f"matmul failed: {dev.matmul_error}", HANG_FIX)
    errs = f"relative error fp32 {dev.fp32_rel_err:.1e}" + (
        f", bf16 {dev.bf16_rel_err:.1e}" if dev.bf16_rel_err is not None else "")
    if (dev.fp32_rel_err or 0.0) > FP32_TOL or (dev.bf16_rel_err or 0.0) > BF16_TOL:
        tf32 = [k for k in ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
                if k in facts.host.env]
        fix = (f"{' and '.join(tf32)} set: unset to get true fp32" if tf32 else
               "the GPU computes wrong results: check `nvidia-smi -q -d ECC` and "
               "`dmesg | grep -i xid`, and try another GPU")
        return row(L.COMPUTE, name, Verdict.FAIL,
                   f"{n}×{n} matmul differs from the CPU: {errs} (fp32 tolerance {FP32_TOL:g})", fix)
    speedup = (dev.cpu_fp32_ms or 0.0) / dev.fp32_ms if dev.fp32_ms else None
    fp32 = _tflops(n, dev.fp32_ms)
    text = (f"{n}×{n} matches the CPU ({errs}); fp32 {dev.fp32_ms:.2f} ms ({fp32:.1f} TFLOP/s) "
            f"vs CPU {dev.cpu_fp32_ms:.0f} ms: {speedup:.0f}× faster")
    bf16 = _tflops(n, dev.bf16_ms)
    if bf16 is not None:
        text += f"; bf16 {bf16:.0f} TFLOP/s"
        if dev.spec_bf16_tflops:
            text += f" ({bf16 / dev.spec_bf16_tflops:.0%} of the {dev.spec_bf16_tflops:g} datasheet peak)"
    if speedup is not None and speedup < MIN_SPEEDUP:
        return row(L.COMPUTE, name, Verdict.WARN, text + f": less than {MIN_SPEEDUP:g}× the CPU",
                   "the GPU may be shared, throttled (`nvidia-smi -q -d PERFORMANCE`) or a small "
                   "MIG slice; run `gpudoctor bench` for its real ceilings")
    if bf16 is not None and dev.spec_bf16_tflops and bf16 < MIN_PEAK_FRACTION * dev.spec_bf16_tflops:
        return row(L.COMPUTE, name, Verdict.WARN, text + ": far below the datasheet",
                   "check clocks and throttling (`nvidia-smi -q -d PERFORMANCE,CLOCK`) and "
                   "whether other jobs share the GPU")
    return row(L.COMPUTE, name, Verdict.PASS, text)


def _precision_row(facts: EnvFacts, dev: GpuProbe) -> CheckResult:
    name = f"gpu{dev.index}.bf16_tf32"
    torch = facts.torch
    cap = dev.capability or (0, 0)
    if not dev.bf16_supported:
        return row(L.COMPUTE, name, Verdict.WARN,
                   f"sm_{cap[0]}{cap[1]} has no bf16 or TF32 tensor cores",
                   "train with fp16 autocast and a GradScaler (torch.amp.GradScaler('cuda'))")
    tf32 = _tflops(dev.matmul_n, dev.tf32_ms)
    fp32 = _tflops(dev.matmul_n, dev.fp32_ms)
    gain = f"TF32 matmul {tf32:.0f} TFLOP/s vs fp32 {fp32:.0f}" if tf32 and fp32 else "TF32 supported"
    on = torch is not None and torch.matmul_allow_tf32
    state = ("TF32 is on for matmul" if on else
             "TF32 is off for matmul by default: torch.set_float32_matmul_precision('high') turns it on")
    return row(L.COMPUTE, name, Verdict.PASS, f"bf16 supported; {gain}; {state}")


def communication_rows(facts: EnvFacts) -> list[CheckResult]:
    rows = [_dist_env_row(facts)]
    count = facts.torch.device_count if facts.torch is not None else 0
    if count < 2:
        why = f"{count} GPU{'' if count == 1 else 's'} visible: needs 2 or more"
        return [row(L.COMMUNICATION, "p2p", Verdict.SKIP, why),
                row(L.COMMUNICATION, "nccl.allreduce", Verdict.SKIP, why), *rows]
    if facts.p2p is None:
        rows.insert(0, row(L.COMMUNICATION, "p2p", Verdict.SKIP, "not reached (the probe stopped)"))
    else:
        rows.insert(0, _p2p_row(facts))
    rows.insert(1, _nccl_row(facts))
    return rows


def _p2p_row(facts: EnvFacts) -> CheckResult:
    matrix = facts.p2p or ()
    n = len(matrix)
    missing = [f"{i}→{j}" for i in range(n) for j in range(n) if i != j and not matrix[i][j]]
    if missing:
        return row(L.COMMUNICATION, "p2p", Verdict.WARN,
                   f"no peer-to-peer access for {', '.join(missing[:8])}: NCCL copies through "
                   "host memory, all-reduce is slower",
                   "check `nvidia-smi topo -m`; in VMs enable P2P (ACS/IOMMU settings); if NCCL "
                   "hangs on P2P, NCCL_P2P_DISABLE=1 is the (slower) workaround")
    return row(L.COMMUNICATION, "p2p", Verdict.PASS,
               f"all {n * (n - 1)} ordered GPU pairs can access each other's memory (P2P)")


def _nccl_row(facts: EnvFacts) -> CheckResult:
    nccl, name = facts.nccl, "nccl.allreduce"
    if nccl is None:
        if facts.probe.status == "timeout" and "NCCL" in facts.probe.stage:
            return row(L.COMMUNICATION, name, Verdict.FAIL,
                       f"the 2-process all-reduce hung past the {facts.probe.timeout_s:g} s timeout",
                       NCCL_FIX)
        return row(L.COMMUNICATION, name, Verdict.SKIP, "not reached (the probe stopped earlier)")
    if nccl.status == "ok":
        bw = nccl.bytes / (nccl.ms / 1000.0) / 1e9 if nccl.ms else 0.0
        return row(L.COMMUNICATION, name, Verdict.PASS,
                   f"{nccl.world_size} processes over NCCL: sum {nccl.got:g} is right; "
                   f"{nccl.bytes / MIB:.0f} MiB in {nccl.ms:.2f} ms ({bw:.0f} GB/s bus bandwidth)")
    if nccl.status == "wrong_sum":
        return row(L.COMMUNICATION, name, Verdict.FAIL,
                   f"all-reduce gave {nccl.got:g}, expected {nccl.expected:g}: data corrupted "
                   "between GPUs", "try NCCL_P2P_DISABLE=1 to rule out a broken P2P path; " + NCCL_FIX)
    return row(L.COMMUNICATION, name, Verdict.FAIL, f"all-reduce {nccl.status}: {nccl.error}",
               NCCL_FIX)


def _dist_env_row(facts: EnvFacts) -> CheckResult:
    env = facts.host.env
    stray = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
                         "MASTER_PORT") if k in env]
    nccl = {k: v for k, v in env.items() if k.startswith(("NCCL_", "TORCH_NCCL_"))}
    p2p_ok = facts.p2p is not None and all(
        facts.p2p[i][j] for i in range(len(facts.p2p)) for j in range(len(facts.p2p)) if i != j)
    if nccl.get("NCCL_P2P_DISABLE") == "1" and p2p_ok:
        return row(L.COMMUNICATION, "dist.env", Verdict.WARN,
                   "NCCL_P2P_DISABLE=1 is set although every GPU pair has P2P: collectives go "
                   "through host memory", "unset NCCL_P2P_DISABLE unless it works around a hang")
    if stray:
        return row(L.COMMUNICATION, "dist.env", Verdict.WARN,
                   "launcher variables set in this shell: " + ", ".join(f"{k}={env[k]}" for k in stray),
                   "unset them: torchrun sets its own, and a stray NODE_RANK/RANK makes a plain run "
                   "wait for peers that never come")
    shown = ", ".join(f"{k}={v}" for k, v in nccl.items()) or "none"
    return row(L.COMMUNICATION, "dist.env", Verdict.PASS,
               f"no stray RANK/WORLD_SIZE/MASTER_* variables; NCCL variables: {shown}")

"""The sampler's schedule: absolute deadlines, slower cadences for costly reads, a pid cache."""

from __future__ import annotations

import time

import pytest

from gpudoctor.collectors import nvml_device
from gpudoctor.collectors.cadence import Deadlines, Every
from gpudoctor.collectors.nvml import GpuSampler


class SimTime:
    """One simulated clock for the wall stamp, the scheduler and the driver's blocking calls."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def blocking_pcie(fake_nvml, sim: SimTime, cost_s: float = 0.020):
    """Make each PCIe counter read cost ``cost_s`` of simulated time, as the driver's does."""
    original = fake_nvml.nvmlDeviceGetPcieThroughput
    calls = []

    def read(d, counter):
        sim.now += cost_s
        calls.append((round(sim.now, 6), d.name))
        return original(d, counter)

    fake_nvml.nvmlDeviceGetPcieThroughput = read
    return calls


def run_simulated(sampler: GpuSampler, sim: SimTime, seconds: float) -> None:
    end = sim.now + seconds

    def wait(pause: float) -> bool:
        assert pause >= 0
        sim.now += pause
        return sim.now >= end - 1e-9

    sampler._open()
    sampler._loop(wait)


# -- Deadlines and Every (pure) ----------------------------------------------------------------
def test_deadlines_keep_the_asked_rate_whatever_a_tick_costs():
    ticks, now, starts = Deadlines(0.1, 0.0), 0.0, []
    for _ in range(600):
        starts.append(now)
        now += 0.045  # a sample with two 20 ms PCIe reads
        now += ticks.wait_after_tick(now)
    assert starts[-1] == pytest.approx(59.9)  # 600 ticks in 60 s: 10/s, no drift
    assert all(s == pytest.approx(k * 0.1) for k, s in enumerate(starts))
    assert ticks.skipped == 0


def test_a_slow_tick_skips_missed_grid_points_instead_of_bursting():
    ticks = Deadlines(0.1, 0.0)
    pause = ticks.wait_after_tick(0.25)  # this tick ran 250 ms: 0.1 and 0.2 are gone
    assert pause == pytest.approx(0.05)  # the next tick is at 0.3, on the grid
    assert ticks.skipped == 2
    assert ticks.wait_after_tick(0.31) == pytest.approx(0.09)  # back on 0.4, no catch-up


def test_every_is_due_first_then_per_interval_with_slack_and_on_clock_steps():
    e = Every(1.0, slack=0.025)
    assert e.due(10.0)
    e.done(10.0)
    assert not e.due(10.5)
    assert e.due(10.99)  # a millisecond-early tick still counts as due
    assert e.due(9.0)  # the wall clock stepped back: read now rather than wait for it
    assert Every(0.0).due(10.0)
    with pytest.raises(ValueError, match=">= 0"):
        Every(-1.0)
    with pytest.raises(ValueError, match="interval must be > 0"):
        Deadlines(0, 0.0)


# -- the sampler thread against a simulated clock ------------------------------------------------
@pytest.mark.parametrize("gpus", [1, 4])
def test_achieved_rate_is_the_asked_rate_with_blocking_pcie(
    gpus, fake_nvml_factory, fake_device_factory, stable_commands
):
    sim = SimTime()
    fake = fake_nvml_factory(devices=[fake_device_factory(f"GPU{i}") for i in range(gpus)])
    pcie_calls = blocking_pcie(fake, sim)
    s = GpuSampler(interval=0.1, nvml=fake, clock=sim, monotonic=sim)
    run_simulated(s, sim, 10.0)
    stamps = sorted({x.timestamp_s for x in s.samples()})
    first_tick_cost = gpus * 2 * 0.020  # every GPU's counters once, on the first sample
    missed = int(first_tick_cost // 0.1)
    assert len(stamps) == 100 - missed
    assert s.skipped_ticks == missed
    steady = [b - a for a, b in zip(stamps[1:], stamps[2:])]
    assert steady == pytest.approx([0.1] * len(steady))  # every later tick on time
    # after the first sample, at most one GPU's two counters per tick
    later = [t for t, _ in pcie_calls if t > stamps[1] - 1e-9]
    per_tick = {}
    for t in later:
        tick = max(x for x in stamps if x <= t + 1e-9)
        per_tick[tick] = per_tick.get(tick, 0) + 1
    assert max(per_tick.values()) == 2
    # and each GPU's PCIe is refreshed about once a second
    names = [n for _, n in pcie_calls]
    assert all(18 <= names.count(f"GPU{i}") <= 22 for i in range(gpus))
    assert all(x.pcie_rx_bytes_per_s is not None for x in s.samples())  # repeated in between


def test_the_real_thread_keeps_its_rate_with_blocking_pcie(fake_nvml_factory, fake_device_factory):
    """Four GPUs whose PCIe reads sleep 20 ms each (160 ms a tick if all were read every tick)."""
    fake = fake_nvml_factory(devices=[fake_device_factory(f"GPU{i}") for i in range(4)])
    original = fake.nvmlDeviceGetPcieThroughput

    def sleepy(d, counter):
        time.sleep(0.020)
        return original(d, counter)

    fake.nvmlDeviceGetPcieThroughput = sleepy
    with GpuSampler(interval=0.1, nvml=fake, processes=False) as s:
        time.sleep(1.6)
    stamps = sorted({x.timestamp_s for x in s.samples()})
    assert len(stamps) >= 13, stamps  # 16 asked; reading every PCIe counter each tick gives ~10


# -- slower cadences ----------------------------------------------------------------------------
def test_process_list_refreshes_at_its_own_interval(fake_nvml, fake_clock, stable_commands):
    calls = []
    original = fake_nvml.nvmlDeviceGetComputeRunningProcesses

    def counting(d):
        calls.append(d.name)
        return original(d)

    fake_nvml.nvmlDeviceGetComputeRunningProcesses = counting
    h200 = fake_nvml.devices[0]
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, process_interval=1.0)  # clock: 0.1 s/sample
    first = [s.sample_once()[0] for _ in range(5)]
    h200.procs.append((7, 1 << 20))  # a new process: it shows at the next refresh, not before
    rest = [s.sample_once()[0] for _ in range(25)]
    assert calls.count("NVIDIA H200") == 3  # at 0.0, 1.0 and 2.0 s
    assert calls.count("Tesla T4") == 1  # unsupported: asked once
    stream = first + rest
    assert all(x.processes is stream[0].processes for x in stream[:10])
    assert 7 not in {p.pid for p in stream[9].processes}
    assert 7 in {p.pid for p in stream[10].processes}


def test_process_interval_zero_reads_every_sample(fake_nvml, fake_clock, stable_commands):
    calls = []
    original = fake_nvml.nvmlDeviceGetComputeRunningProcesses
    fake_nvml.nvmlDeviceGetComputeRunningProcesses = lambda d: calls.append(1) or original(d)
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, process_interval=0, indices=[0])
    for _ in range(4):
        s.sample_once()
    assert len(calls) == 4


def test_command_lines_are_looked_up_once_per_pid_while_it_stays(
    fake_nvml, fake_clock, monkeypatch
):
    lookups = []

    def lookup(pid):
        lookups.append(pid)
        return {4242: "python train.py"}.get(pid, "")

    monkeypatch.setattr(nvml_device, "command_for_pid", lookup)
    h200 = fake_nvml.devices[0]
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, process_interval=0, indices=[0])
    for _ in range(20):
        s.sample_once()
    assert sorted(lookups) == [4242, 999_999_999]  # a failed look-up ("") is cached too
    procs = h200.procs
    h200.procs = [p for p in procs if p[0] != 4242]  # the process ends ...
    s.sample_once()
    h200.procs = procs  # ... and its pid comes back: maybe another program, so look again
    again = s.sample_once()[0]
    assert lookups.count(4242) == 2
    assert {p.pid: p.command for p in again.processes}[4242] == "python train.py"


def test_pcie_is_repeated_between_reads_and_a_failed_read_is_retried(fake_nvml, fake_clock):
    calls = []
    original = fake_nvml.nvmlDeviceGetPcieThroughput
    failures = iter([False, False, True])  # the second tick's RX read fails once

    def flaky(d, counter):
        calls.append(counter)
        if next(failures, False):
            raise fake_nvml.NVMLError("Unknown Error")
        return original(d, counter)

    fake_nvml.nvmlDeviceGetPcieThroughput = flaky
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, pcie_interval=0.3, indices=[0])
    stream = [s.sample_once()[0] for _ in range(7)]  # t = 0.0 .. 0.6
    # reads at 0.0 (rx, tx), 0.3 (rx fails), 0.4 (retried: rx, tx); nothing else until 0.7
    assert len(calls) == 5
    assert stream[1].pcie_rx_bytes_per_s == stream[0].pcie_rx_bytes_per_s  # repeated
    assert stream[3].pcie_rx_bytes_per_s is None
    assert stream[3].unavailable == {"pcie": "NVMLError: Unknown Error"}
    assert stream[4].pcie_rx_bytes_per_s == 1_500_000 * 1024.0 and stream[4].unavailable is None
    assert stream[6].pcie_tx_bytes_per_s == 250_000 * 1024.0


def test_power_limit_and_ecc_are_read_on_the_slow_cadence(fake_nvml, fake_clock):
    calls = []
    original = fake_nvml.nvmlDeviceGetEnforcedPowerLimit
    fake_nvml.nvmlDeviceGetEnforcedPowerLimit = lambda d: calls.append(d.name) or original(d)
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, slow_interval=1.0, indices=[0])
    stream = [s.sample_once()[0] for _ in range(15)]
    assert calls == ["NVIDIA H200"] * 2  # at 0.0 and 1.0 s
    assert {x.power_limit_w for x in stream} == {700.0}
    assert {x.ecc_errors_uncorrected for x in stream} == {0}


def test_a_transient_ecc_mode_error_does_not_turn_ecc_off_for_good(fake_nvml, fake_clock):
    original = fake_nvml.nvmlDeviceGetEccMode
    failures = iter([True])

    def flaky(d):
        if next(failures, False):
            raise fake_nvml.NVMLError("Unknown Error")
        return original(d)

    fake_nvml.nvmlDeviceGetEccMode = flaky
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, slow_interval=5.0, indices=[0])
    first, second = s.sample_once()[0], s.sample_once()[0]
    assert first.ecc_errors_uncorrected is None and "ecc" in first.unavailable
    assert second.ecc_errors_uncorrected == 0 and second.unavailable is None


@pytest.mark.parametrize("name", ["process_interval", "pcie_interval", "slow_interval"])
def test_a_negative_cadence_is_a_value_error(name):
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        GpuSampler(**{name: -1})

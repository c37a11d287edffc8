"""Reading link and power evidence through NVML, with a fake pynvml (no GPU here)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from gpudoctor.bench.links import probe_link, probe_links


class _Props:
    name = "NVIDIA H200"
    uuid = "1234-abcd"


def _fake_torch(monkeypatch, count: int = 2, peers: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: _Props())
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: peers)


def _fake_nvml(monkeypatch, *, links: int = 18, power_err: bool = False) -> types.SimpleNamespace:
    class NotSupported(Exception):
        pass

    calls = types.SimpleNamespace(init=0, shutdown=0, uuid=None)

    def init():
        calls.init += 1

    def shutdown():
        calls.shutdown += 1

    def by_uuid(uuid):
        calls.uuid = uuid
        return "handle"

    def limit(h):
        if power_err:
            raise NotSupported()
        return 500_000

    def nvlink_state(h, link):
        if link >= links:
            raise NotSupported()
        return 1

    fake = types.SimpleNamespace(
        nvmlInit=init, nvmlShutdown=shutdown, nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetHandleByIndex=lambda i: "handle",
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 4, nvmlDeviceGetCurrPcieLinkWidth=lambda h: 8,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5, nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetPowerManagementLimit=limit,
        nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 700_000,
        NVML_CLOCK_SM=1, nvmlDeviceGetClockInfo=lambda h, c: 1500, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x1,  # sw power cap + idle (ignored)
        NVML_NVLINK_MAX_LINKS=18, NVML_FEATURE_ENABLED=1,
        nvmlDeviceGetNvLinkState=nvlink_state, nvmlDeviceGetNvLinkVersion=lambda h, link: 4,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return calls


def test_probe_reads_every_field(monkeypatch) -> None:
    _fake_torch(monkeypatch)
    calls = _fake_nvml(monkeypatch)
    link = probe_link(0)
    assert (link.pcie_gen_current, link.pcie_width_current, link.pcie_gen_max, link.pcie_width_max) == (4, 8, 5, 16)
    assert (link.nvlink_active_links, link.nvlink_version, link.p2p_peers) == (18, 4, (1,))
    assert (link.power_limit_w, link.default_power_limit_w) == (500.0, 700.0)
    assert (link.sm_clock_mhz, link.max_sm_clock_mhz, link.throttle_reasons) == (1500, 1980, ("sw_power_cap",))
    assert link.unavailable is None
    assert calls.uuid == "GPU-1234-abcd" and calls.init == calls.shutdown == 1


def test_a_field_nvml_refuses_is_none_with_the_reason(monkeypatch) -> None:
    _fake_torch(monkeypatch, peers=False)
    _fake_nvml(monkeypatch, links=0, power_err=True)
    link = probe_link(1)
    assert link.power_limit_w is None and link.unavailable == {"power_limit_w": "NotSupported"}
    assert link.nvlink_active_links == 0 and link.nvlink_version is None and link.p2p_peers == ()


def test_without_nvml_only_torch_p2p_is_filled(monkeypatch) -> None:
    _fake_torch(monkeypatch)
    broken = types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(OSError("libnvidia-ml.so.1 not found")))
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    link = probe_link(0)
    assert link.p2p_peers == (1,) and link.pcie_gen_max is None
    assert link.unavailable["pcie"] == "NVML unavailable (OSError)"


def test_probe_links_never_raises(monkeypatch) -> None:
    def boom(i):
        raise RuntimeError("CUDA error: initialization error")

    monkeypatch.setattr(torch.cuda, "get_device_properties", boom)
    (link,) = probe_links(1)
    assert link.index == 0 and "initialization error" in link.unavailable["probe"]


@pytest.mark.parametrize("count", [0])
def test_no_gpus_no_links(count) -> None:
    assert probe_links(count) == ()

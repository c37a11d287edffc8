"""Probes for ``gpudoctor check``: they gather facts (:class:`~gpudoctor.records.env.EnvFacts`);
the rules in :mod:`gpudoctor.analysis.env_rules` judge them.

``gather_facts`` reads the driver through NVML first (before any context of ours exists, so
its list of processes holding GPU memory is other people's), then starts the torch probe
subprocess and reads the host while torch imports there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpudoctor.collectors.env.driver import read_driver
from gpudoctor.collectors.env.host import read_host
from gpudoctor.collectors.env.runner import ProbeProcess
from gpudoctor.records.env import EnvFacts

DEFAULT_TIMEOUT_S = 60.0

__all__ = ["DEFAULT_TIMEOUT_S", "gather_facts"]


def gather_facts(*, timeout_s: float = DEFAULT_TIMEOUT_S,
                 probe_argv: Sequence[str] | None = None) -> EnvFacts:
    """Observe this machine's GPU stack.

    Args:
        timeout_s: how long the torch probe subprocess may run before it is killed as hung.
        probe_argv: the probe command (tests use a stand-in that hangs or crashes).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}; try 60")
    start = time.perf_counter()
    driver = read_driver()
    probe = ProbeProcess(timeout_s, probe_argv)
    host = read_host()
    parts = probe.finish()
    return EnvFacts(driver=driver, host=host, gathered_ms=(time.perf_counter() - start) * 1000.0,
                    **parts)

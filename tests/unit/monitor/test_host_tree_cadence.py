"""HostSampler lists the job's process tree on its own cadence and reads known members between."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from gpudoctor.collectors.host import HostSampler


@pytest.fixture
def children_calls(monkeypatch):
    calls = []
    original = psutil.Process.children

    def counting(self, recursive=False):
        calls.append(self.pid)
        return original(self, recursive=recursive)

    monkeypatch.setattr(psutil.Process, "children", counting)
    return calls


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_the_tree_is_listed_at_its_own_interval(children_calls, fake_clock_factory):
    clock = fake_clock_factory(step=0.5)
    s = HostSampler(interval=0.5, root_pid=os.getpid(), clock=clock, tree_interval=2.0)
    first = s.sample_once()  # t = 0.0: listed
    child = _sleeper()
    try:
        between = [s.sample_once() for _ in range(3)]  # 0.5, 1.0, 1.5: known members only
        relisted = s.sample_once()  # 2.0: listed again, the new child appears
    finally:
        child.kill()
        child.wait()
    gone = s.sample_once()  # 2.5: the child has exited, dropped without a listing
    assert len(children_calls) == 2
    assert child.pid not in first.tree_pids
    assert all(child.pid not in x.tree_pids and os.getpid() in x.tree_pids for x in between)
    assert child.pid in relisted.tree_pids
    assert child.pid not in gone.tree_pids and os.getpid() in gone.tree_pids
    assert len(children_calls) == 2


def test_tree_interval_zero_lists_every_sample(children_calls, fake_clock_factory):
    s = HostSampler(interval=0.5, root_pid=os.getpid(), clock=fake_clock_factory(step=0.5),
                    tree_interval=0)
    for _ in range(3):
        s.sample_once()
    assert len(children_calls) == 3


def test_a_root_that_ends_between_listings_gives_an_empty_tree(fake_clock_factory):
    root = _sleeper()
    s = HostSampler(interval=0.5, root_pid=root.pid, clock=fake_clock_factory(step=0.5))
    assert s.sample_once().tree_pids == (root.pid,)
    root.kill()
    root.wait()
    after = s.sample_once()
    assert after.tree_pids == () and after.tree_rss_bytes is None


def test_a_negative_tree_interval_is_a_value_error():
    with pytest.raises(ValueError, match="tree_interval must be >= 0"):
        HostSampler(tree_interval=-1)

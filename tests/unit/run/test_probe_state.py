"""The probes' state holds the user's objects weakly (collectors/instrument/state.py).

Probing a script must not keep its optimizer, its DDP module or its DataLoaders alive: after the
script drops them they are garbage-collected, a rebuilt optimizer takes over the step count, and
the config written at the end still describes them (from the config written after the first
step).
"""

from __future__ import annotations

import gc
import json
import sys
import weakref
from pathlib import Path

from cli_runner import gpudoctor

from gpudoctor.collectors.instrument.state import State
from gpudoctor.records.rundir import load_run

# Two phases, each with its own DDP model (gloo, world size 1), optimizer and loader, dropped
# when the phase returns; the script then checks they were collected while the probes ran.
SCRIPT = """
import gc, json, os, socket, weakref
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)

def phase(steps):
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    for _, (x, y) in zip(range(steps), loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [weakref.ref(opt), weakref.ref(model), weakref.ref(loader)]

first = phase(6)
gc.collect()
alive_first = [r() is not None for r in first]
second = phase(6)  # a new optimizer: the probes follow it once the first one is gone
gc.collect()
json.dump({"alive_first": alive_first, "alive_second": [r() is not None for r in second]},
          open("alive.json", "w"))
dist.destroy_process_group()
"""


def test_probes_let_the_users_objects_go_and_keep_working(tmp_path: Path) -> None:
    (tmp_path / "phases.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--full", "--no-profile", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "phases.py", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    alive = json.loads((tmp_path / "alive.json").read_text(encoding="utf-8"))
    # optimizer, DDP module, loader: none kept alive by the probes
    assert alive == {"alive_first": [False, False, False], "alive_second": [False, False, False]}
    run = load_run(tmp_path / "rd")
    assert [s.step for s in run.steps[0]] == list(range(12))  # both optimizers' steps counted
    cfg = run.configs[0]
    # written at exit, when every object was gone: from the config of the first step
    assert cfg.optimizer == "SGD" and cfg.param_count == 9 and cfg.device == "cpu"
    assert cfg.ddp is not None and cfg.ddp.kind == "ddp"
    assert [lo.dataset for lo in cfg.loaders] == ["TensorDataset"]
    assert cfg.world_size == 1 and cfg.backend == "gloo"


class _Opt:
    """Stands in for an optimizer: the state only needs identity and weak references."""


def test_the_primary_optimizer_is_held_weakly() -> None:
    state = State()
    opt = _Opt()
    assert state.set_primary(opt) and state.seen.optimizer is opt
    assert not state.set_primary(_Opt())  # a second optimizer while the first lives: not primary
    ref = weakref.ref(opt)
    del opt
    gc.collect()
    assert ref() is None and state.seen.optimizer is None
    rebuilt = _Opt()
    assert state.set_primary(rebuilt) and state.seen.optimizer is rebuilt


def test_loader_counters_do_not_keep_the_loader() -> None:
    state = State()
    loader = _Opt()
    state.loaders.add(loader)
    state.loader_counts_of(loader).epochs += 1
    assert state.loader_counts_of(loader).epochs == 1
    ref = weakref.ref(loader)
    del loader
    gc.collect()
    assert ref() is None and len(state.loaders) == 0 and len(state.loader_counts) == 0


def test_adopt_keeps_the_settings_and_drops_the_rest(tmp_path: Path) -> None:
    state = State(installed=True, run_dir=tmp_path, rank=3, steps_limit=10, window=(2, 4))
    state.step, state.syncs = 7, 5
    state.seen.compiled = True
    state.adopt()
    assert (state.installed, state.run_dir, state.rank, state.steps_limit, state.window) == (
        True, tmp_path, 3, 10, (2, 4))
    assert state.step == 0 and state.syncs == 0 and not state.seen.compiled

"""An optimizer-step clock that owes nothing to gpudoctor: run a script and time its steps.

    python benchmarks/stepclock.py OUT.json --warm 20 -- train.py --steps 80

Registers a global optimizer step post-hook (``torch.optim.optimizer.
register_optimizer_step_post_hook``), runs the script with ``runpy`` in its own folder, and on
exit writes the host time of every step and the steady figure: the time from step ``--warm``
to the end of the last step, both read after ``torch.cuda.synchronize()`` (two syncs in the
whole run), over the steps between them. No profiler, no probes.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--warm", type=int, default=20, help="steps left out at the start")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    stamps: list[float] = []
    marks: dict[str, float] = {}
    cuda = torch.cuda.is_available()

    def sync_now() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def hook(optimizer, args, kwargs) -> None:  # noqa: ARG001 - the hook's signature
        stamps.append(time.perf_counter())
        if len(stamps) == ns.warm:
            marks["t_warm"] = sync_now()

    def report() -> None:
        end = sync_now()
        steady = None
        if "t_warm" in marks and len(stamps) > ns.warm:
            steady = (end - marks["t_warm"]) * 1e3 / (len(stamps) - ns.warm)
        with open(ns.out, "w", encoding="utf-8") as f:
            json.dump({"steps": len(stamps), "warm": ns.warm, "steady_step_ms": steady,
                       "stamps_s": stamps}, f)

    register_optimizer_step_post_hook(hook)
    atexit.register(report)
    script = os.path.abspath(ns.script)
    os.chdir(os.path.dirname(script))
    sys.path.insert(0, os.path.dirname(script))
    sys.argv = [script, *ns.args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()

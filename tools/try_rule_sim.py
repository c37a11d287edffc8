"""How often the ``--try`` rule (analysis/try_compare.py) errs, by simulation.

    PYTHONPATH=src python tools/try_rule_sim.py

Each simulated ``--try`` draws run throughputs ``1 + effect + N(0, sigma)`` for the try arm and
``1 + N(0, sigma)`` for the baseline, interleaved, and repeats pairs exactly as ``run --try``
does (``needs_more``, at most 4 of each); it prints how often each verdict came out and the
mean runs of each arm.
"""

from __future__ import annotations

import random

from gpudoctor.analysis.try_compare import DEFAULT_MAX_RUNS, judge, needs_more

CASES = ((0.0, 0.01), (0.0, 0.05), (0.03, 0.01), (0.05, 0.02), (0.10, 0.02), (0.10, 0.05), (0.40, 0.03),
         (-0.05, 0.02))


def simulate(effect: float, sigma: float, trials: int = 20000, seed: int = 2) -> tuple[dict[str, float], float]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    runs = 0
    for _ in range(trials):
        baseline: list[float] = []
        tried: list[float] = []
        while True:
            baseline.append(rng.gauss(1.0, sigma))
            tried.append(rng.gauss(1.0 + effect, sigma))
            judgement = judge(baseline, tried)
            if not needs_more(judgement, max_runs=DEFAULT_MAX_RUNS):
                break
        counts[judgement.verdict] = counts.get(judgement.verdict, 0) + 1
        runs += len(baseline)
    return {k: v / trials for k, v in sorted(counts.items())}, runs / trials


def main() -> None:
    for effect, sigma in CASES:
        shares, runs = simulate(effect, sigma)
        verdicts = ", ".join(f"{k} {v:.1%}" for k, v in shares.items())
        print(f"effect {effect:+.0%} sigma {sigma:.0%}: {verdicts}; {runs:.2f} runs of each")


if __name__ == "__main__":
    main()

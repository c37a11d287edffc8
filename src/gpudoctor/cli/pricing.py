"""``--price-per-gpu-hour P`` (or ``GPUDOCTOR_PRICE_PER_GPU_HOUR``), shared by ``run``,
``doctor``, ``diagnose`` and ``report``: the price that turns step times into what the run, its
findings' wasted time and a verified fix cost (:mod:`gpudoctor.analysis.cost`)."""

from __future__ import annotations

import math
from typing import Any

import typer

PRICE_ENV = "GPUDOCTOR_PRICE_PER_GPU_HOUR"
PRICE_HELP = ("Price of one GPU for one hour (any currency): adds what the run costs per 1,000 steps "
              "and per epoch, and what each finding wastes.")


def _check(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise typer.BadParameter(f"{value}: give a positive price per GPU-hour, e.g. 2.5")
    return value


def price_option() -> Any:
    """The option, read from the environment variable when not given on the command line."""
    return typer.Option(None, "--price-per-gpu-hour", metavar="P", envvar=PRICE_ENV, callback=_check,
                        help=PRICE_HELP)

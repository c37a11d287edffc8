"""torch.compile trials that silently ran eager: prevented where cheap, caught where not.

In-process trials share dynamo's cache for the engine's compiled step (one code object, the
engine's ``forward_loss``). Each trial builds a new model; when its class is the same one every
time (defined at module level), dynamo's guards pass and the cached graphs are reused (measured on
the CPU, ``benchmarks/tune_compile_cache.py``: 4 graphs over 14 trials, fp32 and bf16, each again
once the batch varies). A factory that defines the class inside a function makes a new type per
call: every trial fails the type guard and recompiles, and at the 9th dynamo hits its recompile
limit (8) and runs the step eager from then on, without an error (the trial still said ``ok``). A
trial judged on that measures eager, not compile.

* **Prevented**: before a compile trial whose model is made of other module types than the last
  compile trial's, dynamo is reset (``torch.compiler.reset()``). Such a trial recompiles anyway
  (its type guard fails), so the reset costs it nothing; a module-level class never changes type and
  is never reset, so its cached graphs keep being reused.
* **Caught**: during a compile trial, dynamo's own evidence of a limit hit is watched: the warning
  it logs on ``torch._dynamo.convert_frame`` (``"torch._dynamo hit config.%s (%s)"`` with the
  limit's name and value: the same text and arguments in every torch 2.x source read, from the
  ``cache_size_limit`` releases to 2.14, and in the GPU image's torch 2.11 log,
  ``tests/fixtures/explain/h200/logs/recompile_limit.log``) and, should that logger be silenced
  (``TORCH_LOGS``), the hit dynamo counts in ``torch._dynamo.utils.counters["unimplemented"]``
  (the key's wording changed between versions; each names the limit). A hit marks the trial
  rejected with the reason in words, and dynamo is reset so the next trial compiles again (torch
  2.14 otherwise keeps running that code eager for the rest of the process, and counts no more hits).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

_LOGGER = "torch._dynamo.convert_frame"  # logging.getLogger(__name__) in convert_frame.py
_WARNING = "torch._dynamo hit config."
# the wordings of a hit in counters["unimplemented"] in torch 2.x sources: "cache_size_limit reached",
# "recompile_limit reached", "Dynamo cache limit exceeded ... Limit type: recompile_limit", and
# "Dynamo recompile limit exceeded ... Limit type: recompile_limit" (2.14, measured here). A version
# that raises RecompileLimitExceeded instead may count nothing: the warning is the first source.
_COUNTER_WORDS = ("recompile_limit", "cache_size_limit", "recompile limit", "cache limit")

_last_types: frozenset[type] | None = None  # the module types of the last compile trial's model
# what this process did so far (read by benchmarks and tests): resets before a trial whose model
# types changed, and compile trials dynamo ran eager
counts = {"compile_trials": 0, "type_resets": 0, "fell_back": 0}


class _Hits(logging.Handler):
    """Keeps dynamo's limit warnings: ``(limit name, value)`` each."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.hits: list[tuple[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(_WARNING):
            args = record.args if isinstance(record.args, tuple) else ()
            self.hits.append((str(args[0]) if args else "", args[1] if len(args) > 1 else None))


class Watch:
    """One compile trial's watch: ``reason`` is set when dynamo hit a recompile limit during it."""

    def __init__(self) -> None:
        self.reset = False  # dynamo was reset before the trial (the model's types changed)
        self.reason = ""


def _counted_hits() -> int:
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every torch 2.x has it
        return 0
    return sum(n for key, n in counters.get("unimplemented", {}).items()
               if any(word in str(key).lower() for word in _COUNTER_WORDS))


def _limit_now(name: str) -> tuple[str, Any]:
    import torch._dynamo.config as config

    if not name:
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return name, getattr(config, name, None)


def reason(limit: str, value: Any) -> str:
    """The rejected trial's reason in words (``limit``: the config name dynamo reported)."""
    graphs = f"after {value} graph{'' if value == 1 else 's'} " if isinstance(value, int) else ""
    return (f"torch.compile stopped recompiling {graphs}(dynamo's {limit}) and ran this trial eager: define "
            f"the model class at module level (a class made per call is a new type every trial) or raise "
            f"torch._dynamo.config.{limit}")


def _reset() -> None:
    import torch

    torch.compiler.reset()


@contextlib.contextmanager
def watch(model: Any, *, compiling: bool) -> Iterator[Watch]:
    """Around one trial: reset dynamo first when ``model``'s module types differ from the last
    compile trial's; afterwards ``reason`` says whether dynamo gave up and ran eager. A no-op when
    the trial does not compile."""
    global _last_types
    state = Watch()
    if not compiling:
        yield state
        return
    types = frozenset(type(m) for m in model.modules()) if hasattr(model, "modules") else frozenset({type(model)})
    counts["compile_trials"] += 1
    if _last_types is not None and types != _last_types:
        _reset()
        state.reset = True
        counts["type_resets"] += 1
    _last_types = types
    before = _counted_hits()
    handler = _Hits()
    logger = logging.getLogger(_LOGGER)
    logger.addHandler(handler)
    try:
        yield state
    finally:
        logger.removeHandler(handler)
        if handler.hits or _counted_hits() > before:
            limit, value = handler.hits[0] if handler.hits else ("", None)
            state.reason = reason(*(_limit_now(limit) if value is None else (limit, value)))
            counts["fell_back"] += 1
            _reset()  # the next compile trial starts from an empty cache, not from a code dynamo gave up on
            _last_types = None

"""Frameworks that drive the training step: each finding's fix as the framework's own knob.

Where Lightning (``Trainer(...)``, a ``LightningModule``), Hugging Face's ``Trainer`` with
``TrainingArguments(...)``, or Accelerate (``Accelerator(...)``) runs the step, patching a loop is
no fix (there is none in the script) and autocast around the user's forward would fight the
framework's own precision plugin. The fix is the framework's keyword (:data:`KNOBS`, one reason
per entry). Where the framework's call is in the file and the knob is a plain keyword of it
(``precision=`` of ``Trainer``, ``bf16=`` of ``TrainingArguments``, ``mixed_precision=`` of
``Accelerator``), it is a source change like any other: measured, kept only if faster. It is not
patched, but advice naming the knob, where the keyword reads something else (``precision=
cfg.precision``: set it there; a Hydra config), the call takes ``**kwargs`` (the keyword could be
given twice), or the call is not in the file. A Trainer built by ``hydra.utils.instantiate(cfg.trainer,
...)`` (annotated ``trainer: Trainer``) under ``@hydra.main`` gets Hydra overrides
(``++trainer.precision=bf16-mixed``).

Knob names checked against each framework's documentation (docs search, 2026-12): Lightning 2.x
``Trainer(precision="bf16-mixed" | "16-mixed", benchmark=True)`` (1.x: ``precision="bf16"`` or
``16``; a call with ``gpus=``, removed in 2.0, is read as 1.x); transformers 4.x-5.x
``TrainingArguments(bf16, fp16, tf32, torch_compile, dataloader_num_workers,
dataloader_pin_memory, dataloader_persistent_workers)``; Accelerate 0.31-1.x
``Accelerator(mixed_precision="bf16" | "fp16", dynamo_backend="inductor")``. The versions on the
GPU image are not recorded in this repository: the patched run's measurement is the check (an
unknown keyword makes it fail, and a failed run is never kept).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gpudoctor.fix.ops import SET_KWARGS, Change, Op


@dataclass(frozen=True, slots=True)
class Knob:
    """A framework's own setting for one change kind: ``call``'s keywords, or ``text`` advice only."""

    call: str  # the class whose call takes it ("" where there is no keyword: advice only)
    kwargs: tuple[tuple[str, str], ...]
    text: str
    why: str


_LOADER_PL = ("in the LightningDataModule's train_dataloader() (or wherever the DataLoader given to trainer.fit is "
              "built): DataLoader(..., num_workers={w}, pin_memory=True, persistent_workers=True)")
_CL = ("model = model.to(memory_format=torch.channels_last) where the model is built, and the 4-D batch "
       "x.contiguous(memory_format=torch.channels_last) in the step")
KNOBS: dict[tuple[str, str], Knob] = {
    ("lightning", "bf16"): Knob("Trainer", (("precision", '"bf16-mixed"'),), 'Trainer(precision="bf16-mixed")',
                                "Lightning's precision plugin runs the step under bf16 autocast"),
    ("lightning", "fp16"): Knob("Trainer", (("precision", '"16-mixed"'),), 'Trainer(precision="16-mixed")',
                                "Lightning's fp16 plugin: autocast and its own GradScaler"),
    ("lightning", "cudnn_benchmark"): Knob("Trainer", (("benchmark", "True"),), "Trainer(benchmark=True)",
                                           "Lightning sets torch.backends.cudnn.benchmark from it"),
    ("lightning", "tf32"): Knob("", (), 'torch.set_float32_matmul_precision("high") before trainer.fit(...)',
                                "Lightning's Trainer has no TF32 argument"),
    ("lightning", "compile"): Knob("", (), "model = torch.compile(model) on the LightningModule before trainer.fit(model)",
                                   "Lightning's Trainer has no compile argument; it trains a compiled module"),
    ("lightning", "channels_last"): Knob("", (), _CL + " (training_step)", "no Trainer argument for the layout"),
    ("lightning", "loader"): Knob("", (), _LOADER_PL, "Lightning iterates the user's DataLoader"),
    ("lightning", "pin_memory"): Knob("", (), _LOADER_PL, "Lightning iterates the user's DataLoader"),
    ("lightning", "persistent"): Knob("", (), _LOADER_PL, "Lightning iterates the user's DataLoader"),
    ("lightning", "non_blocking"): Knob("", (), _LOADER_PL, "Lightning copies the batch itself: pin the loader"),
    ("hf", "bf16"): Knob("TrainingArguments", (("bf16", "True"),), "TrainingArguments(bf16=True)",
                         "the Trainer runs the step under bf16 autocast"),
    ("hf", "fp16"): Knob("TrainingArguments", (("fp16", "True"),), "TrainingArguments(fp16=True)",
                         "the Trainer's fp16 autocast and GradScaler"),
    ("hf", "tf32"): Knob("TrainingArguments", (("tf32", "True"),), "TrainingArguments(tf32=True)",
                         "the Trainer turns TF32 matmuls on"),
    ("hf", "compile"): Knob("TrainingArguments", (("torch_compile", "True"),), "TrainingArguments(torch_compile=True)",
                            "the Trainer compiles the model"),
    ("hf", "loader"): Knob("TrainingArguments", (), "TrainingArguments(dataloader_num_workers={w}, "
                           "dataloader_pin_memory=True, dataloader_persistent_workers=True)",
                           "the Trainer builds the DataLoader from these"),
    ("hf", "pin_memory"): Knob("TrainingArguments", (("dataloader_pin_memory", "True"),),
                               "TrainingArguments(dataloader_pin_memory=True)", "the Trainer's DataLoader pins"),
    ("hf", "persistent"): Knob("TrainingArguments", (("dataloader_persistent_workers", "True"),),
                               "TrainingArguments(dataloader_persistent_workers=True)",
                               "the Trainer's DataLoader keeps its workers"),
    ("hf", "non_blocking"): Knob("", (), "TrainingArguments(dataloader_pin_memory=True)",
                                 "the Trainer copies the batch itself, non-blocking from pinned memory"),
    ("hf", "cudnn_benchmark"): Knob("", (), "torch.backends.cudnn.benchmark = True before trainer.train()",
                                    "TrainingArguments has no cuDNN benchmark argument"),
    ("hf", "channels_last"): Knob("", (), _CL + " (a data collator)", "no TrainingArguments field for the layout"),
    ("accelerate", "bf16"): Knob("Accelerator", (("mixed_precision", '"bf16"'),), 'Accelerator(mixed_precision="bf16")',
                                 "accelerator.backward and the prepared model run under bf16 autocast"),
    ("accelerate", "fp16"): Knob("Accelerator", (("mixed_precision", '"fp16"'),), 'Accelerator(mixed_precision="fp16")',
                                 "Accelerate's fp16 autocast and its GradScaler in accelerator.backward"),
    ("accelerate", "compile"): Knob("Accelerator", (("dynamo_backend", '"inductor"'),),
                                    'Accelerator(dynamo_backend="inductor")', "accelerator.prepare compiles the model"),
}
# (framework, keyword) -> its literal values that are mixed precision already: a bf16 change on top
# of them is no fix (HF raises on fp16=True with bf16=True)
MIXED: dict[tuple[str, str], frozenset] = {
    ("hf", "fp16"): frozenset({True}), ("hf", "bf16"): frozenset({True}),
    ("lightning", "precision"): frozenset({16, "16", "16-mixed", "bf16", "bf16-mixed", "bf16-true", "16-true"}),
    ("accelerate", "mixed_precision"): frozenset({"fp16", "bf16", "fp8"}),
}
# kinds Accelerate owns even where the script's own loop is located (its loop is the user's)
ACCELERATE_OWNS = frozenset({"bf16", "fp16", "compile"})
NAMES = {"lightning": "Lightning", "hf": "Hugging Face Trainer", "accelerate": "Accelerate"}


def framework(ctx) -> tuple[str, ast.Call | None] | None:
    """``(framework, its call in the file or None)`` where the file hands its step to one."""
    found = {}
    for call, _ in ctx.calls:
        name = ctx.qualname(call.func) or ""
        top, last = name.partition(".")[0], name.rpartition(".")[2]
        if top in ("lightning", "pytorch_lightning") and last == "Trainer":
            found.setdefault("lightning", call)
        elif top == "transformers" and last == "TrainingArguments":
            found.setdefault("hf", call)
        elif top == "transformers" and last == "Trainer":
            found.setdefault("hf_trainer", call)
        elif top == "accelerate" and last == "Accelerator":
            found.setdefault("accelerate", call)
    for node in ast.walk(ctx.tree):  # `trainer: Trainer = hydra.utils.instantiate(cfg.trainer, ...)`
        if isinstance(node, ast.AnnAssign) and _instantiate(ctx, node.value) and (ctx.qualname(node.annotation) or "") \
                .partition(".")[0] in ("lightning", "pytorch_lightning") and ast.unparse(node.annotation).endswith("Trainer"):
            found.setdefault("lightning", node.value)
    if "hf" in found or "hf_trainer" in found:
        return "hf", found.get("hf")
    for key in ("lightning", "accelerate"):
        if key in found:
            return key, found[key]
    bases = {ctx.qualname(b) or "" for n in ast.walk(ctx.tree) if isinstance(n, ast.ClassDef) for b in n.bases}
    if any(b.partition(".")[0] in ("lightning", "pytorch_lightning") and b.endswith("LightningModule") for b in bases):
        return "lightning", None
    return None


def _instantiate(ctx, node) -> bool:
    """``hydra.utils.instantiate(cfg.x, ...)``: the object is built from the config node ``cfg.x``."""
    return isinstance(node, ast.Call) and bool(node.args) and (ctx.qualname(node.func) or "").startswith("hydra") \
        and (ctx.qualname(node.func) or "").endswith("instantiate")


def _option_for(found, value: ast.AST, wanted: str):
    """The script's own option that ``value`` (``args.mixed_precision``) reads, as the edit that
    gives it ``wanted`` (``bf16``), where its ``choices`` hold that spelling (Accelerate's examples:
    ``--mixed_precision {no,fp16,bf16,fp8}``); else ``None``."""
    from gpudoctor.fix.ops import OptionEdit
    from gpudoctor.fix.options import long_flags, parser_options

    if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)):
        return None
    option = parser_options(found.ctx.tree).get(value.attr)
    text = wanted.strip('"')
    choices = next((k.value for k in option.call.keywords if k.arg == "choices"), None) if option else None
    if option is None or option.action is not None or not any(
            isinstance(e, ast.Constant) and e.value == text for e in getattr(choices, "elts", [])):
        return None
    return OptionEdit(flags=option.flags, value=text, was=ast.unparse(option.default) if option.default else "",
                      longs=long_flags(found.ctx.tree))


def _chain(node: ast.AST) -> list[str] | None:
    """``cfg.trainer.precision`` -> ``["cfg", "trainer", "precision"]``; ``None`` for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _hydra_root(found, call: ast.Call) -> str:
    """The config parameter of the ``@hydra.main(...)`` function holding ``call``, or of the function
    holding it that the ``@hydra.main`` one calls with its config (the template's ``main(cfg)`` ->
    ``train(cfg)``); ``""``: none."""
    funcs = [f for f in ast.walk(found.ctx.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.args.args]
    for main in (f for f in funcs if any(isinstance(d, ast.Call) and found.ctx.qualname(d.func) == "hydra.main"
                                         for d in f.decorator_list)):
        root = main.args.args[0].arg
        if any(n is call for n in ast.walk(main)):
            return root
        for func in (f for f in funcs if any(n is call for n in ast.walk(f))):
            passed = [i for c in ast.walk(main) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == func.name
                      for i, a in enumerate(c.args) if isinstance(a, ast.Name) and a.id == root]
            if passed and passed[0] < len(func.args.args):
                return func.args.args[passed[0]].arg
    return ""


def _hydra_overrides(found, call: ast.Call, kwargs) -> tuple:
    """Hydra's ``++path=value`` overrides (add or override) for ``kwargs`` where the call reads
    them from the ``@hydra.main`` config: ``Trainer(**cfg.trainer)`` -> ``++trainer.precision=bf16-mixed``,
    ``Trainer(precision=cfg.train.precision)`` -> ``++train.precision=bf16-mixed``; ``()`` where any
    keyword is not read from the config that way."""
    from gpudoctor.fix.ops import OptionEdit

    root = _hydra_root(found, call)
    if not root:
        return ()
    given = {k.arg: _chain(k.value) for k in call.keywords if k.arg}
    stars = [_chain(k.value) for k in call.keywords if k.arg is None]
    if _instantiate(found.ctx, call):  # its first argument is the config node the object is built from
        stars = [_chain(call.args[0])]
    out = []
    for key, value in kwargs:
        path = given.get(key) if key in given else (stars[0] + [key] if len(stars) == 1 and stars[0] else None)
        if not path or path[0] != root or len(path) < 2:
            return ()
        text = value.strip('"')
        text = text.lower() if text in ("True", "False") else text
        out.append(OptionEdit(flags=(f"++{'.'.join(path[1:])}={text}",), value=""))
    return tuple(out)


def _lightning_1x(call: ast.Call | None) -> bool:
    return call is not None and any(k.arg == "gpus" for k in call.keywords)


def framework_change(kind: str, finding, found, why: str, loader=None) -> tuple[Change | None, str] | None:
    """The framework's knob for ``kind``: a change on its call, or advice naming it; ``None``
    where no framework drives the step (or Accelerate's loop is the script's and the kind is not
    one Accelerate owns)."""
    which = framework(found.ctx)
    if which is None:
        return None
    fw, call = which
    if fw == "accelerate" and (kind not in ACCELERATE_OWNS and found.loop is not None):
        return None
    knob = KNOBS.get((fw, kind))
    if knob is None:
        return None if found.loop is not None else (None, f"{NAMES[fw]} drives the step; no knob of it for {kind}")
    workers = (loader.workers or loader.current_workers or 8) if loader is not None else 8
    kwargs = knob.kwargs
    if fw == "hf" and kind == "loader" and loader is not None:
        kwargs = tuple(kv for kv, on in ((("dataloader_num_workers", str(workers)), bool(loader.workers)),
                                         (("dataloader_pin_memory", "True"), loader.pin_memory),
                                         (("dataloader_persistent_workers", "True"), loader.persistent_workers
                                          and bool(loader.workers or loader.current_workers))) if on)
    if fw == "lightning" and kind in ("bf16", "fp16") and _lightning_1x(call):
        kwargs = (("precision", '"bf16"' if kind == "bf16" else "16"),)  # Lightning 1.x spellings
    text = knob.text.format(w=workers)
    advice = f"{NAMES[fw]} drives the step: its own knob is {text} ({knob.why})"
    if not kwargs or knob.call == "" or call is None:
        return None, advice
    overrides = _hydra_overrides(found, call, kwargs)
    if overrides:  # Hydra: the call reads the config; its override on the command line
        words = " ".join(e.flags[0] for e in overrides)
        return Change(kind=kind, code=finding.code, why=f"{why} ({NAMES[fw]}'s {knob.call} from the Hydra config: "
                      f"{words})", ops=(), precision=kind in ("bf16", "fp16", "tf32"), switches=overrides), ""
    if _instantiate(found.ctx, call):
        return None, advice + f"; the {knob.call} is built by hydra.utils.instantiate at line {call.lineno}: set it in its config"
    if any(k.arg is None for k in call.keywords):
        return None, advice + f"; the {knob.call}(...) at line {call.lineno} takes **kwargs: set it there"
    given = {k.arg: k.value for k in call.keywords}
    literal = {k: v.value for k, v in given.items() if isinstance(v, ast.Constant)}
    mixed = [f"{k}={literal[k]!r}" for (f, k), on in MIXED.items() if f == fw and k in literal and literal[k] in on]
    if kind in ("bf16", "fp16") and mixed:
        return None, f"{NAMES[fw]}: {knob.call}(...) at line {call.lineno} runs mixed precision already ({mixed[0]})"
    if fw == "hf" and kind in ("pin_memory", "loader"):  # the Trainer pins by default (dataloader_pin_memory=True)
        kwargs = tuple(kv for kv in kwargs if kv[0] != "dataloader_pin_memory" or literal.get(kv[0]) is False)
    if fw == "hf" and kind == "persistent" and not (isinstance(literal.get("dataloader_num_workers"), int)
                                                    and literal["dataloader_num_workers"] > 0):
        return None, advice + ("; needs dataloader_num_workers > 0 in the same call (the DataLoader refuses "
                               "persistent workers without workers): the loader change sets both")
    if not kwargs:
        return None, f"{NAMES[fw]}: {knob.call}(...) at line {call.lineno} has it already (a default or given)"
    for key, value in kwargs:
        old = given.get(key)
        if old is not None and not isinstance(old, ast.Constant):
            flag = _option_for(found, old, value)
            if flag is not None:  # the script's own option feeds the keyword: give it on the command line
                return Change(kind=kind, code=finding.code, why=f"{why} ({NAMES[fw]}'s {key} from the script's own "
                              f"{flag.flags[0]})", ops=(), precision=kind in ("bf16", "fp16", "tf32"), switches=(flag,)), ""
            seg = ast.get_source_segment(found.ctx.source, old) or ast.unparse(old)
            return None, advice + f"; {key}={seg} at line {call.lineno} reads your configuration: set it there"
    kwargs = tuple((k, v) for k, v in kwargs if not (isinstance(given.get(k), ast.Constant)
                                                      and repr(given[k].value) == v.replace('"', "'")))
    if not kwargs:
        return None, f"{NAMES[fw]}: {knob.call}(...) at line {call.lineno} sets it already"
    op = Op(SET_KWARGS, found.pos(call), found.pos(found.stmt_of(call)), text=(found.callee(call),), kwargs=kwargs)
    return Change(kind=kind, code=finding.code, why=f"{why} ({NAMES[fw]}'s own {knob.call} argument)", ops=(op,),
                  precision=kind in ("bf16", "fp16", "tf32"), file=found.file), ""


__all__ = ["ACCELERATE_OWNS", "KNOBS", "MIXED", "Knob", "framework", "framework_change"]

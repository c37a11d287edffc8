"""Findings -> located :class:`~gpudoctor.fix.ops.Change` objects, or text advice.

One change per fix, each the code form of a ``--try`` knob (:mod:`gpudoctor.analysis.knob_map`
decides which knobs verify which finding; the loader values come from the same
:func:`~gpudoctor.analysis.knob_map.loader_plan` that ``--try`` and the finding's text use):

=====================  ==============================================================
finding                changes
=====================  ==============================================================
GD-RUN-DATALOADER      ``loader`` (workers, pin_memory, persistent_workers, prefetch: a keyword read
                       from the script's own flag gets the flag's default, :mod:`gpudoctor.fix.loader`)
                       and ``non_blocking`` on the batch copies when memory is pinned
GD-RUN-H2D-PAGEABLE    ``loader`` (pin_memory) and ``non_blocking``
GD-RUN-H2D-BLOCKING    ``non_blocking`` (and ``pin_memory`` where the loader does not pin)
GD-RUN-FP32-COMPUTE    ``cudnn_benchmark``, ``tf32``, ``channels_last``, ``bf16`` (knob_map.fp32_knobs)
GD-RUN-CHANNELS-LAST   ``channels_last`` (each conv net the loop trains, and their 4-D inputs:
                       :mod:`gpudoctor.fix.models`)
GD-RUN-CUDNN-BENCHMARK ``cudnn_benchmark``
GD-RUN-LAUNCH-BOUND    ``compile`` (``model.compile()`` on each model the loop trains, before a DDP
                       wrap: state_dict keys unchanged); its larger batch is text advice (it changes the optimisation)
GD-RUN-HOST-SYNC       ``item`` (``acc += loss.item()`` -> ``acc += loss.detach()``, ``losses.append(x.item())``
                       -> ``losses.append(x.detach())``: read when printed, formatted)
GD-RUN-NO-SET-EPOCH    ``set_epoch`` on the DistributedSampler where each epoch starts
GD-RUN-PERIODIC-STALL  ``persistent`` (``persistent_workers=True``) when the finding's data says
                       the first batch of each epoch waits for restarted workers (``worker_restart``);
                       the script's own per-epoch work (``epoch_work_ms``) is text advice only
=====================  ==============================================================

Only WARN (or worse) findings are patched: a tuned script gets no patch. The stall's parts are
read from ``Finding.data`` (:mod:`gpudoctor.analysis.tail_rules`), never from its prose.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field

from gpudoctor.analysis.compute_rules import CODE_LAUNCH, LAUNCH_BATCH
from gpudoctor.analysis.facts import main_loader
from gpudoctor.analysis.knob_map import fp32_knobs, loader_plan
from gpudoctor.analysis.prescription import ms
from gpudoctor.analysis.tail_rules import CODE_STALL, epoch_work_fix
from gpudoctor.fix.frameworks import framework_change
from gpudoctor.fix.hazards import own_ops_reason
from gpudoctor.fix.loader import loader_ops, pair_persistent
from gpudoctor.fix.locate import Located, epoch_loop, sampler_name
from gpudoctor.fix.metrics import item_accumulations, item_reason
from gpudoctor.fix.models import model_ops
from gpudoctor.fix.ops import INSERT_AFTER, INSERT_BEFORE, REPLACE, SET_KWARGS, WRAP, Advice, Change, Op, OptionEdit
from gpudoctor.fix.switches import autocast_call, own_switch, switch_change
from gpudoctor.lint.rules.gd401_data_parallel import QUALS as DATA_PARALLEL
from gpudoctor.records.finding import Finding
from gpudoctor.records.gpu_specs import match_spec
from gpudoctor.records.run import RankConfig

PATCHED = ("GD-RUN-DATALOADER", "GD-RUN-H2D-PAGEABLE", "GD-RUN-H2D-BLOCKING", "GD-RUN-FP32-COMPUTE",
           "GD-RUN-CHANNELS-LAST", "GD-RUN-CUDNN-BENCHMARK", "GD-RUN-LAUNCH-BOUND", "GD-RUN-HOST-SYNC",
           "GD-RUN-NO-SET-EPOCH", CODE_STALL)
PRECISION = frozenset({"bf16", "fp16", "tf32"})
WHY = {
    "loader": "load batches in worker processes, pinned, kept alive and prefetched",
    "pin_memory": "page-locked host memory copies faster and can overlap compute",
    "non_blocking": "copy the batch from pinned memory without blocking the host",
    "cudnn_benchmark": "pick the fastest convolution algorithms for these fixed shapes",
    "tf32": "precision: TF32 tensor cores for fp32 matmuls and convolutions",
    "channels_last": "channels-last convolutions on tensor cores (model and 4-D input)",
    "bf16": "precision: bf16 autocast over the forward and loss (no GradScaler needed)",
    "fp16": "precision: fp16 autocast over the forward and loss, a GradScaler against underflow",
    "compile": "fuse the many small kernels of a launch-bound step",
    "item": "keep the metric on the device: read when printed, not synchronised every step",
    "set_epoch": "a different shuffle every epoch on every rank",
    "persistent": "workers kept alive between epochs",
}


@dataclass
class Plan:
    """What ``fix`` can patch in one file, and what it can only prescribe."""

    changes: list[Change] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)


def _kinds(finding: Finding, config: RankConfig | None, on_gpu: bool) -> list[str]:
    code = finding.code
    if code == "GD-RUN-DATALOADER":
        plan = loader_plan(main_loader(config), config, on_gpu)
        kinds = ["loader"] if (plan.workers or plan.pin_memory or plan.persistent_workers
                               or plan.prefetch_factor) else []
        return kinds + (["non_blocking"] if plan.non_blocking else [])
    if code == "GD-RUN-H2D-PAGEABLE":
        return ["pin_memory", "non_blocking"]
    if code == "GD-RUN-H2D-BLOCKING":
        loader = main_loader(config)
        return ["non_blocking"] if loader is not None and loader.pin_memory else ["pin_memory", "non_blocking"]
    if code == "GD-RUN-FP32-COMPUTE":
        return fp32_knobs(config)
    if code == CODE_STALL:  # an epoch boundary whose first batch waited for restarted workers
        data = dict(finding.data)
        return ["persistent"] if data.get("worker_restart") and data.get("first_batch_wait_ms", 0.0) > 0 else []
    return {"GD-RUN-CHANNELS-LAST": ["channels_last"], "GD-RUN-CUDNN-BENCHMARK": ["cudnn_benchmark"],
            "GD-RUN-LAUNCH-BOUND": ["compile"], "GD-RUN-HOST-SYNC": ["item"],
            "GD-RUN-NO-SET-EPOCH": ["set_epoch"]}.get(code, [])


def plan_fix(found: Located, findings: list[Finding], config: RankConfig | None) -> Plan:
    """The changes for the WARN-or-worse findings with a code fix, in the findings' order."""
    on_gpu = config is not None and config.device.startswith("cuda")
    plan, done = Plan(), set()
    for finding in findings:
        if finding.code not in PATCHED or finding.severity.value == "info":
            continue
        for kind in _kinds(finding, config, on_gpu):
            kind = "fp16" if kind == "bf16" and not _has_bf16(config) else kind
            if kind in done:
                continue
            done.add(kind)
            if kind == "pin_memory" and any(c.kind == "loader" and _sets_pin(c) for c in plan.changes):
                continue  # the loader change pins already
            if kind == "non_blocking" and any("non_blocking" in dict(o.kwargs) for c in plan.changes for o in c.ops):
                continue  # the host tensors' pinning made the copies non-blocking already
            change, reason = _change(kind, finding, found, config, on_gpu)
            if change is not None and change.switches and any(
                    set(change.switches) <= set(c.switches) for c in plan.changes):
                continue  # the same flags as a change planned already (timm's --pin-mem in the loader change)
            if change is not None and change.kind == "loader" and _sets_pin(change):
                plan.changes = [c for c in plan.changes if c.kind != "pin_memory"]
            if change is not None:
                plan.changes.append(change)
            elif reason:  # "": nothing to change there (already done in the code)
                plan.advice.append(Advice(code=finding.code, reason=f"{kind}: {reason}", fix=finding.fix))
        if finding.code == CODE_STALL:
            plan.advice += _epoch_work_advice(finding)
        if finding.code == CODE_LAUNCH:
            plan.advice.append(_batch_advice(finding))
    return _pair_non_blocking(found, Plan(pair_persistent(plan.changes), plan.advice))


def _epoch_work_advice(finding: Finding) -> list[Advice]:
    """The script's own per-epoch work of an epoch-boundary stall (image dumps, checkpoints), as
    text: when a script saves its checkpoints or images is part of what it does, not a speed knob."""
    data = dict(finding.data)
    work = data.get("epoch_work_ms")
    if work is None:
        return []  # the analysis did not prescribe it: too small a part of the boundary
    syncs = (f", {ms(data.get('sync_ms', 0.0))} of it blocked in {data.get('host_syncs', 0.0):.0f} host sync(s)"
             if data.get("sync_ms") else "")
    return [Advice(code=finding.code, reason=(
        f"epoch_work: the script's own work at each epoch boundary (image dumps, checkpoints, evaluation) "
        f"took {ms(work)} an epoch{syncs}; changing when it runs changes what the script does, so that "
        "is yours to decide"), fix=epoch_work_fix(work))]


def _batch_advice(finding: Finding) -> Advice:
    """The launch-bound prescription's larger batch, as text: it does the same work in fewer, longer
    kernels, but changes the optimisation (fewer steps an epoch, the learning rate to rescale, a
    different gradient noise), so it is the user's decision and is never patched; ``compile`` is."""
    return Advice(code=finding.code, reason=(
        "batch: a larger batch changes what the script computes (fewer optimizer steps an epoch, "
        "a learning rate to rescale): yours to decide, then measure it with gpudoctor run"),
        fix=LAUNCH_BATCH)


def _pair_non_blocking(found: Located, plan: Plan) -> Plan:
    """``non_blocking`` copies only help from pinned memory: with a change that pins the loader it
    joins that change (measured together); without pinned memory it is left out."""
    blocking = next((c for c in plan.changes if c.kind == "non_blocking"), None)
    if blocking is None:
        return plan
    rest = [c for c in plan.changes if c is not blocking]
    pins = next((c for c in rest if c.kind in ("loader", "pin_memory") and _sets_pin(c)), None)
    if pins is not None:
        ops = tuple(dataclasses.replace(o, why=WHY["non_blocking"]) for o in blocking.ops)
        plan.changes = [dataclasses.replace(c, ops=c.ops + ops) if c is pins else c for c in rest]
    elif not _pinned(found):
        plan.changes = rest
    return plan


def _has_bf16(config: RankConfig | None) -> bool:
    """bf16 unless the GPU is known to lack it (before Ampere: fp16 with a GradScaler instead)."""
    spec = match_spec(config.device_name) if config is not None and config.device_name else None
    return spec is None or spec.peak_tflops("bf16") is not None


def _fp16_ops(found: Located) -> tuple[list[Op], str]:
    """fp16 autocast, and the GradScaler in its order: scale the loss for backward, unscale before
    a gradient clip, step through the scaler, update it after the step."""
    if found.autocast or "scaler" in found.ctx.source:
        return [], "the script already uses autocast or a name `scaler`"
    if found.custom_ops:
        return [], own_ops_reason(found.custom_ops)
    if found.step_func is not found.func:
        return [], "the step is in a helper of the loop's function: the GradScaler has no one place"
    step_stmt, back_stmt = found.stmt_of(found.step), found.stmt_of(found.backward)
    if found.forward is None or not isinstance(back_stmt, ast.Expr) or not isinstance(step_stmt, ast.Expr) \
            or found.loss is None or found.optimizer is None or found.step.args:
        return [], "; ".join(found.notes) or "the forward, loss.backward() and optimizer.step() were not located"
    first, last = (found.pos(s) for s in found.forward)
    loop = found.pos(found.enclosing_loops()[0] if found.enclosing_loops() else found.loop)
    opt, loss = found.optimizer, found.loss
    ops = [Op(INSERT_BEFORE, loop, loop, text=('scaler = torch.amp.GradScaler("cuda")',)),
           Op(WRAP, first, first, text=('torch.autocast("cuda", dtype=torch.float16)',), last=last),
           Op(REPLACE, found.pos(found.backward.func), found.pos(back_stmt),
              text=(f"scaler.scale({loss}).backward", f"{loss}.backward"),
              why="the loss scaled up, so fp16 gradients do not underflow"),
           Op(REPLACE, found.pos(found.step), found.pos(step_stmt), text=(f"scaler.step({opt})", f"{opt}.step()"),
              why="steps with the unscaled gradients; skips a step whose gradients overflowed"),
           Op(INSERT_AFTER, found.pos(step_stmt), found.pos(step_stmt), text=("scaler.update()",),
              why="adjusts the scale after every step")]
    for call, _ in found.ctx.calls:  # a clip between backward and step needs the true gradients
        if (call.func.attr if isinstance(call.func, ast.Attribute) else "") in ("clip_grad_norm_", "clip_grad_value_") \
                and back_stmt.lineno < call.lineno < step_stmt.lineno:
            at = found.pos(found.stmt_of(call))
            ops.append(Op(INSERT_BEFORE, at, at, text=(f"scaler.unscale_({opt})",),
                          why="the clip must see the true (unscaled) gradients"))
    return ops, ""


def _sets_pin(change: Change) -> bool:
    return any("pin_memory" in dict(o.kwargs) for o in change.ops)


def _pinned(found: Located) -> bool:
    call = found.loader_call
    return call is not None and any(k.arg == "pin_memory" and isinstance(k.value, ast.Constant)
                                    and k.value.value is True for k in call.keywords)


def _change(kind: str, finding: Finding, found: Located, config: RankConfig | None,
            on_gpu: bool) -> tuple[Change | None, str]:
    code = finding.code
    loader = loader_plan(main_loader(config), config, on_gpu)
    flagged = switch_change(kind, finding, found, WHY[kind], loader)
    if flagged is not None:  # the script's own flag implements it: a command-line change
        return flagged, ""
    framed = framework_change(kind, finding, found, WHY[kind], loader)
    if framed is not None:  # Lightning, HF Trainer, Accelerate: the framework's own knob
        return framed
    if found.loop is None:
        return None, "; ".join(found.notes) or "the training loop was not found"
    if kind in ("cudnn_benchmark", "tf32", "channels_last", "bf16", "compile") and not found.torch_name:
        return None, "the file does not `import torch` as torch"
    options: tuple[OptionEdit, ...] = ()
    if kind == "persistent":
        ops, reason = _persistent_ops(found, dict(finding.data))
    elif kind in ("loader", "pin_memory"):
        ops, reason, options = loader_ops(kind, found, config, on_gpu)
    else:
        ops, reason = _ops(kind, found, config, on_gpu)
    if not ops:
        return None, reason
    return Change(kind=kind, code=code, why=WHY[kind], ops=tuple(ops), precision=kind in PRECISION,
                  file=found.file, options=options), ""


def _ops(kind: str, found: Located, config: RankConfig | None, on_gpu: bool) -> tuple[list[Op], str]:
    if kind == "non_blocking":
        ops = [Op(SET_KWARGS, found.pos(c), found.pos(found.stmt_of(c)), text=(found.callee(c),),
                  kwargs=(("non_blocking", "True"),))
               for c in found.batch_moves]
        done = found.batch_moves_non_blocking
        return ops, "" if done else "no .to()/.cuda() of the batch tensors in the training loop"
    if kind == "compile" and compile_blocker(found):
        return [], compile_blocker(found)
    if kind in ("compile", "channels_last"):
        return model_ops(kind, found)  # every model the loop trains (a GAN: two), before a DDP wrap
    if kind in ("cudnn_benchmark", "tf32") and found.model_assign is None:
        return [], f"the assignment of the model ({found.model_outer or 'unknown'}) before the loop was not found"
    at = found.pos(found.model_assign) if found.model_assign is not None else None
    if kind == "cudnn_benchmark":
        return [Op(INSERT_BEFORE, at, at, text=("torch.backends.cudnn.benchmark = True",))], ""
    if kind == "tf32":
        return [Op(INSERT_BEFORE, at, at, text=("torch.backends.cuda.matmul.allow_tf32 = True",
                                                 "torch.backends.cudnn.allow_tf32 = True"))], ""
    if kind == "bf16":
        if found.autocast:
            return [], "the script already uses autocast" + own_switch(found, autocast_call(found))
        bce = bce_blocker(found)
        if bce:
            return [], bce
        if found.custom_ops:
            return [], own_ops_reason(found.custom_ops)
        if found.forward is None:
            return [], "; ".join(found.notes) or "the forward and loss were not located"
        first, last = (found.pos(s) for s in found.forward)
        device = "cuda" if on_gpu or config is None else config.device.partition(":")[0]
        return [Op(WRAP, first, first, text=(f'torch.autocast("{device}", dtype=torch.bfloat16)',), last=last)], ""
    if kind == "fp16":
        return _fp16_ops(found)
    if kind == "item":
        src = found.ctx.source
        ops = [Op(REPLACE, found.pos(c.func), found.pos(found.stmt_of(c)),
                  text=(f"{ast.get_source_segment(src, c.func.value)}.detach", ast.get_source_segment(src, c.func)))
               for c in item_accumulations(found)]
        return ops, item_reason(found)
    if kind == "set_epoch":
        sampler, outer = sampler_name(found), epoch_loop(found)
        if sampler is None or outer is None:
            return [], "the DistributedSampler or the epoch loop around the training loop was not found"
        start, var = outer
        done = _sets_epoch(found, start)
        if done is not None:
            return [], (f"the epoch loop already calls {ast.get_source_segment(found.ctx.source, done.func)}(...) "
                        f"at line {done.lineno}")
        first = found.pos(start)
        return [Op(INSERT_BEFORE, first, first, text=(f"{sampler}.set_epoch({var})",))], ""
    return [], f"no code form for {kind}"


def _sets_epoch(found: Located, start: ast.stmt) -> ast.Call | None:
    """A ``X.set_epoch(...)`` call in the epoch loop whose first statement (or holder) is ``start``
    (``sampler.set_epoch(epoch)``, ``train_loader.sampler.set_epoch(epoch)``): a second one is no fix."""
    loop = next((lp for lp in found.enclosing_loops() if any(s is start for s in lp.body)), None)
    for node in ast.walk(loop) if loop is not None else ():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_epoch":
            return node
    return None


# losses CUDA autocast refuses ("unsafe to autocast"), whatever the dtype: they take probabilities
BCE_CALLS = ("torch.nn.BCELoss", "torch.nn.functional.binary_cross_entropy", "torch.binary_cross_entropy")


def bce_blocker(found: Located) -> str:
    """Why bf16 autocast must stay advice, or ``""``: the script builds ``nn.BCELoss`` or calls
    ``F.binary_cross_entropy``, which CUDA autocast raises on at the first step; the fix is the
    logits form (``BCEWithLogitsLoss`` without the model's last ``Sigmoid``), a change of the model."""
    ctx = found.ctx
    for call, _ in ctx.calls:
        if ctx.qualname(call.func) in BCE_CALLS:
            return (f"{ast.get_source_segment(ctx.source, call.func)} at line {call.lineno}: CUDA autocast refuses "
                    "binary_cross_entropy on probabilities; use BCEWithLogitsLoss on logits (drop the model's last "
                    "Sigmoid), then autocast")
    return ""


def compile_blocker(found: Located) -> str:
    """Why ``model.compile()`` must not be added, or ``""``: the script compiles already (its own
    switch, e.g. nanoGPT's ``--compile``, is the one to turn on: compiling twice is not a fix), or
    wraps the model in ``nn.DataParallel``, whose replicas on other GPUs copy the module's
    ``__dict__`` and so would call the original's compiled forward with the original's weights."""
    ctx = found.ctx
    for call, _ in ctx.calls:
        func = call.func
        if ctx.qualname(func) == "torch.compile" or (
                isinstance(func, ast.Attribute) and func.attr == "compile" and not call.args
                and (ctx.qualname(func.value) or "").partition(".")[0] not in ("re", "regex")):
            return (f"the script compiles already (line {call.lineno}): turn on its own switch for it "
                    "rather than compiling twice" + own_switch(found, call))
        if (ctx.qualname(func) == "torch.autograd.grad"
                and any(k.arg == "create_graph" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                        for k in call.keywords)):
            return (f"autograd.grad(..., create_graph=...) at line {call.lineno} differentiates twice (e.g. a gradient "
                    "penalty): compiled modules do not support double backward")
        if ctx.qualname(func) in DATA_PARALLEL:
            return (f"the model is wrapped in nn.DataParallel (line {call.lineno}): its replicas on other GPUs "
                    "would run the compiled original module; move to DistributedDataParallel (lint GD401), "
                    "then compile")
    return ""


def _persistent_ops(found: Located, data: dict[str, float]) -> tuple[list[Op], str]:
    """``persistent_workers`` on the loader the loop iterates (the stall's first batch waited for
    restarted workers): ``True`` where ``num_workers`` is a literal, else true exactly when the
    script's own ``num_workers`` is above 0 (``DataLoader`` refuses persistent workers without
    workers: ``--workers 0`` must still run); not where the call has none or keeps them already."""
    call = found.loader_call
    if call is None:
        return [], "; ".join(n for n in found.notes if "loader" in n.lower()) or "the DataLoader was not located"
    kw = {k.arg: k.value for k in call.keywords}
    workers, stars = kw.get("num_workers"), [k.value for k in call.keywords if k.arg is None]
    persistent = kw.get("persistent_workers")
    if isinstance(persistent, ast.Constant) and persistent.value is True:
        return [], f"the DataLoader(...) at line {call.lineno} has persistent_workers=True already"
    if (workers is None and not stars) or (isinstance(workers, ast.Constant) and not workers.value):
        return [], (f"the DataLoader(...) at line {call.lineno} has num_workers=0, not the workers the run "
                    "restarted: persistent_workers=True would make it raise")
    if isinstance(workers, ast.Constant):
        value = "True"
    elif workers is not None:
        text = ast.get_source_segment(found.ctx.source, workers) or ""
        simple = isinstance(workers, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        value = f"{text if simple else f'({text})'} > 0"
    elif len(stars) == 1 and isinstance(stars[0], ast.Name):
        value = f'{stars[0].id}.get("num_workers", 0) > 0'
    else:
        return [], f"the DataLoader(...) at line {call.lineno} takes its workers from a ** expression"
    wait = ms(data.get("first_batch_wait_ms"))
    why = f"{WHY['persistent']}: the first batch of each epoch waited {wait} for them to restart"
    return [Op(SET_KWARGS, found.pos(call), found.pos(found.stmt_of(call)), text=(found.callee(call),),
               kwargs=(("persistent_workers", value),),
               why=why)], ""


__all__ = ["PATCHED", "WHY", "Plan", "plan_fix"]

"""GD206: a sampling/generation loop (diffusion sampling, autoregressive ``generate``) run with autograd on."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gpudoctor.lint.calls import resolve
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, last_ident

CODE = "GD206"
NAME = "sampling-loop-with-autograd"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = ("sampling loop runs the model with autograd on, keeping every step's activations: "
           "decorate it with `@torch.no_grad()` or `@torch.inference_mode()`")
RATIONALE = (
    "A diffusion sampler or an autoregressive `generate` calls the network tens to thousands of "
    "times, each step feeding on the last. With autograd on, every call records its graph and the "
    "next step's input depends on it, so the activations of all steps stay alive: memory grows "
    "with the number of steps until CUDA runs out, and each step is slower. The rule fires on a "
    "function named like a sampler (`sample`, `p_sample_loop`, `ddim_sample`, `generate`) whose "
    "loop calls the network (a module of the file, `self.model`/`self.unet`/`net`-like names, or "
    "a method of the same class that does), when nothing turns autograd off: no `no_grad`/"
    "`inference_mode` decorator or block around the loop, no call of the function in the file "
    "under one, and no `torch.set_grad_enabled(False)` in the file. Guided samplers that need "
    "gradients (`enable_grad`, `.backward()`, `autograd.grad` in the function) are left alone."
)
BAD = ("class Diffusion(nn.Module):\n    def sample(self, x):\n        for t in reversed(range(1000)):\n"
       "            x = self.p_step(self.model(x, t), x, t)\n        return x\n")
GOOD = ("class Diffusion(nn.Module):\n    @torch.no_grad()\n    def sample(self, x):\n"
        "        for t in reversed(range(1000)):\n            x = self.p_step(self.model(x, t), x, t)\n        return x\n")
_SAMPLER = re.compile(r"^(?:p_|ddim_|ddpm_|dpm_)?sampl(?:e|ing)(?:_loop)?$|^(?:p_|ddim_|ddpm_)sample\w*|^generate$")
_NETS = frozenset({"model", "net", "unet", "denoiser", "denoise_fn", "eps_model", "generator", "decoder",
                   "transformer", "ema_model", "network"})
_NEEDS_GRAD = ("enable_grad", "backward", "autograd.grad", "requires_grad_(True)", "set_grad_enabled(True)")


def _runs_net(ctx: FileContext, call: ast.Call, where) -> bool:
    if isinstance(call.func, (ast.Name, ast.Attribute)):
        if ctx.expr_kind(call.func, where.func) in ("module", "wrapper"):
            return True
        if isinstance(call.func, ast.Name) and call.func.id in _NETS:
            return True
        if (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self" and call.func.attr in _NETS):
            return True
    return False


def _loop_runs_net(ctx: FileContext, func: ast.AST) -> ast.AST | None:
    for call, where in ctx.calls:
        if where.func is not func or where.loop is None or where.no_grad:
            continue
        if _runs_net(ctx, call, where):
            return where.loop
        callee = resolve(ctx, call, where)
        if callee is not None and not callee.other_file and callee.func is not func and not any(
                w.no_grad for c, w in callee.ctx.calls if w.func is callee.func) and any(
                _runs_net(ctx, c, w) for c, w in callee.ctx.calls if w.func is callee.func):
            return where.loop
    return None


def _called_without_grad(ctx: FileContext, name: str) -> bool:
    return any(call_name(c) == name and w.no_grad for c, w in ctx.calls)


def check(ctx: FileContext) -> Iterator[Hit]:
    if "set_grad_enabled(False)" in ctx.source.replace(" ", ""):
        return
    for stmt, where in ctx.stmts:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or not _SAMPLER.match(stmt.name):
            continue
        inner = next((w for c, w in ctx.calls if w.func is stmt), None)
        if inner is None or inner.no_grad or where.no_grad:
            continue
        body = ast.unparse(stmt)
        if any(word in body for word in _NEEDS_GRAD) or _called_without_grad(ctx, stmt.name):
            continue
        if last_ident(stmt).startswith("_test"):
            continue
        loop = _loop_runs_net(ctx, stmt)
        if loop is not None:
            yield Hit(stmt, f"`{stmt.name}()` runs the network in a loop with autograd on, keeping every "
                            "step's activations: decorate it with `@torch.no_grad()` or `@torch.inference_mode()`")

"""The shapes of a fix: located edits (:class:`Op`) grouped into one :class:`Change` per finding.

A position is ``(line, column)`` of a node's first character (line from 1, column in characters
from 0), as libcst's ``PositionProvider`` reports it, so the editor finds the node the locator
found (:mod:`gpudoctor.fix.locate` converts the ``ast`` byte offsets).
"""

from __future__ import annotations

from dataclasses import dataclass

Pos = tuple[int, int]

# Edit kinds
SET_KWARGS = "set_kwargs"  # a call: set keyword arguments (replace the value where present)
INSERT_BEFORE = "insert_before"  # a statement: put lines before it (in its block)
INSERT_AFTER = "insert_after"  # a statement: put lines after it
WRAP = "wrap"  # statements first..last of one block: put them under ``with HEADER:``
REPLACE = "replace"  # an attribute or call: text = (replacement, the expression it replaces)


@dataclass(frozen=True, slots=True)
class Op:
    """One located edit.

    Attributes:
        kind: one of the edit kinds above.
        at: the node edited (a call, a statement, the first wrapped statement, an expression).
        stmt: the statement that gets the ``# gpudoctor fix:`` comment (for inserts and wraps, the
            first new statement gets it instead).
        text: the lines to insert, the ``with`` header, or the replacement expression; for
            ``set_kwargs``, the source of what the call calls (chained calls start alike).
        kwargs: for ``set_kwargs``: ``(name, expression)`` pairs.
        last: for ``wrap``: the last statement wrapped.
        why: this edit's own reason, when it differs from its change's (a merged change).
    """

    kind: str
    at: Pos
    stmt: Pos
    text: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, str], ...] = ()
    last: Pos | None = None
    why: str = ""


@dataclass(frozen=True, slots=True)
class OptionEdit:
    """A command-line option of the script whose default a change sets (:mod:`gpudoctor.fix.options`).

    Attributes:
        flags: its option strings (``("-j", "--workers")``).
        value: the new default, as source text (``"8"``): also the value a command line that sets
            the option itself is given.
        was: the default it replaces, as source text (``"4"``; ``""``: none).
        longs: every ``--long`` option of the script's parser (argparse accepts a unique prefix).
    """

    flags: tuple[str, ...]
    value: str
    was: str = ""
    longs: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "/".join(self.flags)


@dataclass(frozen=True, slots=True)
class Change:
    """The edits that fix one finding, measured and kept or dropped as one.

    Attributes:
        kind: what it does (``loader``, ``non_blocking``, ``bf16``, ``channels_last`` ...).
        code: the finding (or lint rule) code it answers.
        why: the comment's reason, short.
        ops: the located edits.
        precision: it changes the numerics (bf16/fp16 autocast, TF32): named as such, and the loss
            of the first steps before and after is compared.
        file: the path of the module its ops are in when the training loop lives in another file
            of the script's project (:mod:`gpudoctor.fix.project`); ``""``: the script.
        options: the command-line options whose defaults its ops set: a command line that sets
            one itself is measured (and shown) with the new value instead.
        switches: the script's own options that turn this fix on (:mod:`gpudoctor.fix.switches`;
            ``value`` ``""``: a bare flag): a command-line change, its ``ops`` empty; the patched
            run is the same script with them given.
    """

    kind: str
    code: str
    why: str
    ops: tuple[Op, ...]
    precision: bool = False
    file: str = ""  # the file its ops are in, when not the script (a module of its project)
    options: tuple[OptionEdit, ...] = ()
    switches: tuple[OptionEdit, ...] = ()

    @property
    def comment(self) -> str:
        return f"# gpudoctor fix: {self.code} — {self.why}"

    def comment_for(self, op: Op) -> str:
        return f"# gpudoctor fix: {self.code} — {op.why or self.why}"


@dataclass(frozen=True, slots=True)
class Advice:
    """A finding with a code fix that could not be located safely: its prescription, as text."""

    code: str
    reason: str  # why no patch (not located, unparsable ...)
    fix: str  # the finding's own fix text


__all__ = ["INSERT_AFTER", "INSERT_BEFORE", "REPLACE", "SET_KWARGS", "WRAP", "Advice", "Change", "Op", "OptionEdit",
           "Pos"]

"""Records of ``gpudoctor explain``: what a log was matched to, and what could be extracted from it.

Plain data only (standard library); built by ``gpudoctor.explain`` and rendered by
``gpudoctor.report.explain_view``.
"""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class ExtractedError:
    """One error statement found in the text, whether or not the catalog knows it.

    Attributes:
        exception_type: e.g. ``"RuntimeError"``, ``"torch.OutOfMemoryError"``; ``""`` for a bare
            message (an NCCL WARN line, an assert from a kernel).
        message: the text after the type, rank prefix removed, trimmed to one line.
        last_frame: ``"train.py:42"`` of the innermost traceback frame before it, or ``""``.
        ranks: ranks the same error was seen on (empty when the log has no rank markers).
        line_no: 1-based line of its first occurrence.
        occurrences: how many times the same normalised text appears.
    """

    exception_type: str
    message: str
    last_frame: str = ""
    ranks: tuple[int, ...] = ()
    line_no: int = 0
    occurrences: int = 1


@record
class ExplainMatch:
    """One catalog entry that matched, with the evidence.

    Attributes:
        entry_id: stable id of the catalog entry (``"oom-fragmentation"``).
        title: one line in plain words.
        category: ``memory``, ``distributed``, ``dataloader``, ...
        severity: ``"error"`` or ``"warning"``.
        role: ``"root"`` for a likely cause, ``"secondary"`` for a consequence of another failure
            (a watchdog timeout after a crash on another rank).
        confidence: 0.0-1.0; a pattern over the real message text gives >= 0.8, weak keywords < 0.5.
        matched_line: the first matching line, rank prefix removed.
        line_no: 1-based line of the first match.
        occurrences: matching lines in total (repeats across ranks included).
        ranks: ranks the match was seen on.
        notes: facts computed from the message (e.g. reserved-but-unallocated memory).
        cause, verify, fix, links: the catalog's explanation.
        context: the exception and last frame around the match, when one was found.
    """

    entry_id: str
    title: str
    category: str
    severity: str
    role: str
    confidence: float
    matched_line: str
    line_no: int
    occurrences: int
    ranks: tuple[int, ...]
    cause: str
    verify: tuple[str, ...]
    fix: tuple[str, ...]
    links: tuple[str, ...]
    notes: tuple[str, ...] = ()
    context: ExtractedError | None = None


@record
class LauncherFailure:
    """torchrun's ``ChildFailedError`` summary: which rank failed first, and how."""

    rank: int | None
    local_rank: int | None
    exitcode: int | None
    detail: str = ""


@record
class ExplainReport:
    """Everything ``explain`` found in one input.

    Attributes:
        matches: ranked matches; roots first (most likely cause first), then secondary ones.
        extracted: error statements found in the text, in order of first appearance.
        lines_read: number of input lines.
        ranks_seen: every rank that appeared in a rank prefix.
        launcher: torchrun's root-cause summary, when the log has one.
    """

    matches: tuple[ExplainMatch, ...]
    extracted: tuple[ExtractedError, ...]
    lines_read: int
    ranks_seen: tuple[int, ...] = ()
    launcher: LauncherFailure | None = None

    @property
    def roots(self) -> tuple[ExplainMatch, ...]:
        return tuple(m for m in self.matches if m.role == "root")

    @property
    def matched(self) -> bool:
        return bool(self.matches)

"""``explain_text``: from raw text (an error message or a whole multi-rank log) to a ranked report."""

from __future__ import annotations

import re

from gpudoctor.explain.catalog import Catalog, load_catalog
from gpudoctor.explain.context import advise, detect
from gpudoctor.explain.facts import LOG_NOTES
from gpudoctor.explain.logparse import (
    EXTRACT_TRIGGERS,
    blank_source_listings,
    candidate_lines,
    extract_errors,
    parse_launcher,
    split_lines,
    strip_rank,
)
from gpudoctor.explain.matcher import EntryHits, apply_overrides, match_joined, match_lines
from gpudoctor.explain.ranking import rank_matches
from gpudoctor.explain.structure import failure_structure
from gpudoctor.records.explain import ExplainMatch, ExplainReport, ExtractedError

# a line Python's warnings module printed: "<file>:<line>: UserWarning: ..." (any *Warning class),
# or the source line it echoes under it ("  warn(...)" / "  warnings.warn(...)")
_WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning: |^\s*(?:warnings\.)?warn\(")

# an extracted error is the context of a match when it starts this close after the matched line
_CONTEXT_AFTER = 40
_CONTEXT_BEFORE = 3


def _context(hits: EntryHits, errors: list[ExtractedError]) -> ExtractedError | None:
    line_no = hits.first.index + 1
    near = [e for e in errors if line_no - _CONTEXT_BEFORE <= e.line_no <= line_no + _CONTEXT_AFTER]
    return min(near, key=lambda e: abs(e.line_no - line_no)) if near else None


def _severity(hits: EntryHits) -> str:
    """The entry's severity, but ``"warning"`` for an entry with a ``warning_alone`` reason where
    every line it matched is a Python warning: that warning did not stop the program, an error later
    in the log did (bitsandbytes' "compiled without GPU support" is printed at import on a machine
    without a GPU, above whatever error the run then hit). Ranking puts errors before warnings.
    Entries whose warning is the failure itself (CUDA initialisation, a driver too old) keep theirs."""
    entry = hits.entry
    if entry.severity == "error" and entry.warning_alone and all(_WARNING_LINE.search(h.text) for h in hits.hits):
        return "warning"
    return hits.entry.severity


def _situations(hits: EntryHits, lines: list[str]) -> frozenset[str]:
    """The situations (:mod:`gpudoctor.explain.context`) around the entry's strongest hit."""
    index = hits.first.index
    before = "\n".join(lines[max(0, index - 20_000): index + 1]).lower()
    return detect(failure_structure(lines, index), before)


def _to_match(hits: EntryHits, errors: list[ExtractedError], lines: list[str],
              situations: frozenset[str]) -> ExplainMatch:
    entry, first = hits.entry, hits.first
    context_notes, context_fix = advise(entry.id, situations)
    notes: list[str] = list(context_notes)
    if entry.id in LOG_NOTES:
        notes += LOG_NOTES[entry.id](lines, min(h.index for h in hits.hits))
    for hit in hits.hits:
        for note in hit.notes:
            if note not in notes:
                notes.append(note)
    return ExplainMatch(
        entry_id=entry.id,
        title=entry.title,
        category=entry.category,
        severity=_severity(hits),
        role=entry.role,
        confidence=round(hits.confidence, 2),
        matched_line=first.text[:400],
        line_no=min(h.index for h in hits.hits) + 1,
        occurrences=len(hits.hits),
        ranks=tuple(sorted({h.rank for h in hits.hits if h.rank is not None})),
        cause=entry.cause,
        verify=entry.verify,
        fix=context_fix + tuple(f for f in entry.fix if f not in context_fix),
        links=entry.links,
        notes=tuple(notes[:3]),
        context=_context(hits, errors),
    )


def explain_text(text: str, *, catalog: Catalog | None = None) -> ExplainReport:
    """Find the known failures in ``text`` and rank them, root causes first.

    Args:
        text: one error message, a traceback, or a whole log (any size; ranks prefixed by torchrun,
            srun or mpirun are recognised and de-duplicated).
        catalog: the catalog to use; the packaged one by default.

    Returns:
        The ranked matches, every error statement found (for text the catalog does not know), the
        ranks seen, and torchrun's root-cause summary when present.
    """
    catalog = catalog or load_catalog()
    lines = blank_source_listings(text, split_lines(text))
    candidates = candidate_lines(lines, catalog.triggers + EXTRACT_TRIGGERS)
    parsed = {i: strip_rank(lines[i]) for i in sorted(candidates)}
    found = match_lines(catalog, candidates, parsed)
    match_joined(catalog, lines, found)
    apply_overrides(found)
    errors = extract_errors(lines, parsed)
    launcher = parse_launcher(lines, parsed)
    ranks_seen = sorted({rank for rank, _ in parsed.values() if rank is not None})
    situations = {entry_id: _situations(hits, lines) for entry_id, hits in found.items()}
    # an entry that requires a situation (a CUDA "initialization error" inside a DataLoader worker)
    # counts only where that situation is visible
    matches = [_to_match(hits, errors, lines, situations[entry_id])
               for entry_id, hits in found.items()
               if hits.entry.context is None or hits.entry.context in situations[entry_id]]
    return ExplainReport(
        matches=rank_matches(matches, launcher),
        extracted=tuple(errors),
        lines_read=len(lines),
        ranks_seen=tuple(ranks_seen),
        launcher=launcher,
    )

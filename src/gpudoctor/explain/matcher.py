"""Match a text against the catalog: find the lines each entry recognises, apply the entries'
numeric checks and overrides, and collect the evidence per entry."""

from __future__ import annotations

import dataclasses

from gpudoctor.explain.catalog import Catalog, Entry
from gpudoctor.explain.facts import CHECKS
from gpudoctor.explain.logparse import strip_rank

# confidence of a strong (pattern) hit, of a pattern hit whose numeric check also passed, and of
# keyword-only evidence (one keyword, +0.1 per further keyword, capped)
PATTERN_CONFIDENCE = 0.9
CHECKED_CONFIDENCE = 0.95
SYMPTOM_CONFIDENCE = 0.6  # a failure told in words: medium, below any message evidence
KEYWORD_CONFIDENCE = 0.3
KEYWORD_STEP = 0.1
KEYWORD_CAP = 0.5
# a more specific entry removes a less specific one's hits within this many lines of its own
OVERRIDE_WINDOW = 200
# inputs this short are also matched as one joined string (messages wrapped by a browser or email)
JOINED_MAX_LINES = 200
JOINED_MAX_CHARS = 100_000
# a line naming another accelerator backend is no evidence for a CUDA entry, by keyword or by
# pattern: Apple's "MPS backend out of memory" and ROCm's "HIP error: ..." / "torch.OutOfMemoryError:
# HIP out of memory" share words and exception names ("out of memory", "OutOfMemoryError", "invalid
# device function") with NVIDIA failures whose causes and fixes do not apply to them
OTHER_BACKENDS = ("mps backend", "hip error", "hiperror", "rocm", "pytorch_mps_", "amd_serialize_kernel",
                  "hip out of memory", "pytorch_hip_alloc_conf")
# how far around a match in the joined text a backend's name still belongs to the same message
OTHER_BACKEND_REACH = 120


def names_other_backend(low: str) -> bool:
    """Whether a (lower-cased) line names another accelerator backend than CUDA."""
    return any(b in low for b in OTHER_BACKENDS)


@dataclasses.dataclass(slots=True)
class Hit:
    """One line an entry recognised."""

    index: int
    rank: int | None
    confidence: float
    notes: tuple[str, ...]
    text: str


@dataclasses.dataclass(slots=True)
class EntryHits:
    entry: Entry
    hits: list[Hit]

    @property
    def confidence(self) -> float:
        return max(h.confidence for h in self.hits)

    @property
    def first(self) -> Hit:
        strongest = self.confidence
        return next(h for h in self.hits if h.confidence == strongest)


def _match_line(entry: Entry, body: str, low: str) -> tuple[float, tuple[str, ...]] | None:
    """Confidence and notes if ``entry`` recognises this line, else ``None``."""
    if names_other_backend(low):
        return None
    if entry.patterns and any(a in low for a in entry.anchors):
        for pattern in entry.patterns:
            if pattern.search(body):
                if entry.check is None:
                    return PATTERN_CONFIDENCE, ()
                passed, notes = CHECKS[entry.check](body)
                return (CHECKED_CONFIDENCE, notes) if passed else None
    if entry.symptoms and any(a in low for a in entry.symptom_anchors):
        if any(pattern.search(body) for pattern in entry.symptoms):
            return SYMPTOM_CONFIDENCE, ()
    if entry.keywords and entry.check is None:
        found = sum(1 for k in entry.keywords if k in low)
        if found:
            return min(KEYWORD_CAP, KEYWORD_CONFIDENCE + KEYWORD_STEP * (found - 1)), ()
    return None


def match_lines(
    catalog: Catalog,
    candidates: dict[int, set[str]],
    parsed: dict[int, tuple[int | None, str]],
) -> dict[str, EntryHits]:
    """Run the entries whose trigger literals occur in a line over that line. Identical line
    bodies (the same message on many ranks) are matched once and reused."""
    by_trigger = catalog.entries_by_trigger
    order = {e.id: i for i, e in enumerate(catalog.entries)}
    found: dict[str, EntryHits] = {}
    memo: dict[str, list[tuple[Entry, float, tuple[str, ...]]]] = {}
    for index, present in candidates.items():
        entries = {e.id: e for t in present for e in by_trigger.get(t, ())}
        if not entries:
            continue
        rank, body = parsed[index]
        results = memo.get(body)
        if results is None:
            low = body.lower()
            results = []
            for entry in sorted(entries.values(), key=lambda e: order[e.id]):
                outcome = _match_line(entry, body, low)
                if outcome is not None:
                    results.append((entry, *outcome))
            if any(conf >= PATTERN_CONFIDENCE for _, conf, _ in results):
                # keywords are only a fallback: a line another entry recognises by its full
                # message is not also weak evidence for a generic entry
                # (a symptom told in words is kept: the line may describe the failure behind it)
                results = [r for r in results if r[1] >= PATTERN_CONFIDENCE or r[1] == SYMPTOM_CONFIDENCE]
            memo[body] = results
        for entry, confidence, notes in results:
            hit = Hit(index=index, rank=rank, confidence=confidence, notes=notes, text=body.strip())
            bucket = found.get(entry.id)
            if bucket is None:
                found[entry.id] = EntryHits(entry=entry, hits=[hit])
            else:
                bucket.hits.append(hit)
    return found


def _joins(bodies: list[str]) -> list[tuple[str, list[int]]]:
    """The text joined into one line, with each body's start offset: first with a space between
    lines (a message wrapped at a space by a browser, an email or a logger), then with nothing
    between them (a terminal or a paste that hard-wrapped inside a word: "an illeg" / "al memory
    access"), where a line's trailing spaces are kept as the only separator."""
    out = []
    for sep, clean in ((" ", str.strip), ("", lambda b: b.rstrip("\r\n"))):
        parts = [clean(b) for b in bodies]
        starts, offset = [], 0
        for part in parts:
            starts.append(offset)
            offset += len(part) + len(sep) if part else 0
        out.append((sep.join(p for p in parts if p), starts))
    return out


def match_joined(catalog: Catalog, lines: list[str], found: dict[str, EntryHits]) -> None:
    """For short inputs, try the still-unmatched entries on the whole text joined into one line,
    so a message wrapped over several lines is still recognised (pattern hits only)."""
    if len(lines) > JOINED_MAX_LINES or sum(map(len, lines)) > JOINED_MAX_CHARS:
        return
    bodies = [strip_rank(line)[1] for line in lines]
    for joined, starts in _joins(bodies):
        low = joined.lower()
        for entry in catalog.entries:
            if entry.id in found or not any(a in low for a in entry.anchors):
                continue
            for pattern in entry.patterns:
                m = pattern.search(joined)
                if not m or names_other_backend(
                    low[max(0, m.start() - OTHER_BACKEND_REACH): m.end() + OTHER_BACKEND_REACH]
                ):
                    continue
                notes: tuple[str, ...] = ()
                confidence = PATTERN_CONFIDENCE
                if entry.check is not None:
                    passed, notes = CHECKS[entry.check](joined)
                    if not passed:
                        break
                    confidence = CHECKED_CONFIDENCE
                index = max(0, next((i for i in range(len(starts) - 1, -1, -1)
                                     if starts[i] <= m.start() and bodies[i].strip()), 0))
                excerpt = joined[max(0, m.start() - 40): m.end() + 80].strip()
                found[entry.id] = EntryHits(entry=entry, hits=[
                    Hit(index=index, rank=None, confidence=confidence, notes=notes, text=excerpt)
                ])
                break


def apply_overrides(found: dict[str, EntryHits]) -> None:
    """Drop a less specific entry's hits near a more specific entry's hits (an OOM that the
    fragmentation entry explains is not also reported as a plain OOM)."""
    for stronger in list(found.values()):
        for weaker_id in stronger.entry.overrides:
            weaker = found.get(weaker_id)
            if weaker is None:
                continue
            near = [h.index for h in stronger.hits]
            weaker.hits = [
                h for h in weaker.hits
                if not any(abs(h.index - i) <= OVERRIDE_WINDOW for i in near)
            ]
            if not weaker.hits:
                del found[weaker_id]

"""The failure catalog: TOML files under ``explain/catalog/``, one ``[[entry]]`` per failure.

Schema of an entry (every key is checked by :func:`load_catalog`):

=============  ====================================================================================
``id``         stable, unique, kebab-case
``title``      one line in plain words
``category``   memory, environment, cuda-runtime, distributed, dataloader, autograd, amp, ...
``severity``   ``error`` or ``warning`` (warnings rank after errors)
``role``       ``root`` (default) or ``secondary``: usually a consequence of another failure
``anchors``    lower-case literals; at least one must occur in a line before its patterns are tried
``patterns``   regular expressions over real message texts (case-insensitive); a hit is a strong match
``keywords``   weaker lower-case phrases; keywords alone give a low-confidence match
``symptoms``   regular expressions over the failure told in words ("8 GPUs train only 2x faster than
               one", "显存缓慢上涨"); tried when a ``symptom_anchors`` literal occurs in the line; a hit
               is medium-confidence evidence and needs no numeric check (prose gives no numbers)
``check``      optional name of a numeric check in :mod:`gpudoctor.explain.facts` that must pass
``overrides``  ids of less specific entries this one replaces when both match the same incident
``context``    optional situation (:data:`gpudoctor.explain.context.SITUATIONS`) that must be visible
               around the matched line (its frames or nearby text) for the entry to count
``cause``, ``verify``, ``fix``, ``links``, ``seeds``: the explanation
``samples``    ``[[entry.samples]]`` with ``text`` (copied from a public thread) and ``source``
=============  ====================================================================================
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from importlib import resources

from gpudoctor.explain.context import SITUATIONS
from gpudoctor.explain.facts import CHECKS

_ROLES = ("root", "secondary")
_SEVERITIES = ("error", "warning")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_SOURCE = re.compile(r"^(?:[\w.-]+/[\w.-]+#\d+|https?://\S+)$")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """A real message text and the public thread it was copied from."""

    text: str
    source: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One known failure, with its compiled patterns."""

    id: str
    title: str
    category: str
    severity: str
    role: str
    anchors: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    keywords: tuple[str, ...]
    check: str | None
    overrides: tuple[str, ...]
    cause: str
    verify: tuple[str, ...]
    fix: tuple[str, ...]
    links: tuple[str, ...]
    seeds: str
    samples: tuple[Sample, ...]
    file: str
    # why a match on Python warning lines alone ranks as a warning, not as the error that stopped
    # the run ("" for entries whose warning is the failure itself, e.g. CUDA initialisation)
    warning_alone: str = ""
    context: str | None = None
    symptom_anchors: tuple[str, ...] = ()
    symptoms: tuple[re.Pattern[str], ...] = ()

    def __post_init__(self) -> None:
        where = f"{self.file}: entry {self.id!r}"
        if not _ID.match(self.id):
            raise ValueError(f"{where}: id must be kebab-case (a-z, 0-9, '-')")
        if self.role not in _ROLES:
            raise ValueError(f"{where}: role must be one of {_ROLES}, got {self.role!r}")
        if self.severity not in _SEVERITIES:
            raise ValueError(f"{where}: severity must be one of {_SEVERITIES}, got {self.severity!r}")
        if not self.patterns and not self.keywords:
            raise ValueError(f"{where}: give at least one pattern or keyword")
        if not self.anchors:
            raise ValueError(f"{where}: give at least one lower-case anchor literal")
        if bool(self.symptoms) != bool(self.symptom_anchors):
            raise ValueError(f"{where}: symptoms and symptom_anchors go together")
        if any(a != a.lower() or not a for a in self.anchors + self.keywords + self.symptom_anchors):
            raise ValueError(f"{where}: anchors and keywords must be non-empty and lower-case")
        if any(ch.isdigit() or ch == "#" for a in self.triggers for ch in a):
            # lines are de-duplicated with their digits blanked before the trigger scan
            raise ValueError(f"{where}: anchors and keywords must not contain digits or '#'")
        if self.check is not None and self.check not in CHECKS:
            raise ValueError(f"{where}: unknown check {self.check!r}; known: {sorted(CHECKS)}")
        if self.context is not None and self.context not in SITUATIONS:
            raise ValueError(f"{where}: unknown context {self.context!r}; known: {list(SITUATIONS)}")
        if not (self.cause and self.verify and self.fix and self.links):
            raise ValueError(f"{where}: cause, verify, fix and links are all required")
        if not self.samples:
            raise ValueError(f"{where}: add at least one real sample with its source")
        for sample in self.samples:
            if not _SOURCE.match(sample.source):
                raise ValueError(
                    f"{where}: sample source {sample.source!r} must be 'owner/repo#N' or a URL"
                )

    @property
    def triggers(self) -> tuple[str, ...]:
        """Literals whose presence makes a line worth matching against this entry."""
        return self.anchors + self.keywords + self.symptom_anchors


@dataclasses.dataclass(frozen=True, slots=True)
class Catalog:
    """All entries, plus the index the matcher uses to skip lines quickly."""

    entries: tuple[Entry, ...]

    def __post_init__(self) -> None:
        ids = [e.id for e in self.entries]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"catalog ids must be unique; duplicated: {duplicates}")
        known = set(ids)
        for entry in self.entries:
            unknown = [o for o in entry.overrides if o not in known]
            if unknown:
                raise ValueError(f"entry {entry.id!r} overrides unknown ids {unknown}")

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every distinct trigger literal, for the one-pass prefilter over the whole text."""
        return tuple(_by_trigger(self.entries))

    @property
    def entries_by_trigger(self) -> dict[str, tuple[Entry, ...]]:
        """``{trigger literal: entries that list it}``: which entries a line can concern."""
        return _by_trigger(self.entries)


@functools.lru_cache(maxsize=8)
def _by_trigger(entries: tuple[Entry, ...]) -> dict[str, tuple[Entry, ...]]:
    index: dict[str, list[Entry]] = {}
    for entry in entries:
        for trigger in dict.fromkeys(entry.triggers):
            index.setdefault(trigger, []).append(entry)
    return {t: tuple(index[t]) for t in sorted(index)}


def _entry(raw: dict, file: str) -> Entry:
    where = f"{file}: entry {raw.get('id', '?')!r}"
    try:
        patterns = tuple(re.compile(p, re.IGNORECASE) for p in raw.get("patterns", ()))
        symptoms = tuple(re.compile(p, re.IGNORECASE) for p in raw.get("symptoms", ()))
    except re.error as exc:
        raise ValueError(f"{where}: bad pattern ({exc})") from None
    try:
        return Entry(
            id=raw["id"],
            title=raw["title"],
            category=raw["category"],
            severity=raw.get("severity", "error"),
            role=raw.get("role", "root"),
            anchors=tuple(raw.get("anchors", ())),
            patterns=patterns,
            keywords=tuple(raw.get("keywords", ())),
            check=raw.get("check"),
            overrides=tuple(raw.get("overrides", ())),
            cause=" ".join(raw["cause"].split()),
            verify=tuple(raw["verify"]),
            fix=tuple(raw["fix"]),
            links=tuple(raw["links"]),
            seeds=raw.get("seeds", ""),
            samples=tuple(Sample(text=s["text"], source=s["source"]) for s in raw.get("samples", ())),
            file=file,
            warning_alone=" ".join(raw.get("warning_alone", "").split()),
            context=raw.get("context"),
            symptom_anchors=tuple(raw.get("symptom_anchors", ())),
            symptoms=symptoms,
        )
    except KeyError as exc:
        raise ValueError(f"{where}: missing key {exc}") from None


def parse_catalog(texts: dict[str, str]) -> Catalog:
    """Build a catalog from ``{file name: TOML text}`` (tests use this with inline TOML)."""
    entries: list[Entry] = []
    for name in sorted(texts):
        try:
            data = tomllib.loads(texts[name])
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{name}: not valid TOML ({exc})") from None
        entries.extend(_entry(raw, name) for raw in data.get("entry", ()))
    return Catalog(tuple(entries))


@functools.lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """Load and validate the packaged catalog once per process (regexes are compiled once)."""
    folder = resources.files("gpudoctor.explain").joinpath("catalog")
    texts = {
        item.name: item.read_text(encoding="utf-8")
        for item in folder.iterdir()
        if item.name.endswith(".toml")
    }
    if not texts:
        raise ValueError("the explain catalog is empty: gpudoctor/explain/catalog/*.toml is missing")
    return parse_catalog(texts)

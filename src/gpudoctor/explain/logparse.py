"""Reading a (possibly huge, multi-rank) training log: lines, rank prefixes, candidate lines,
error statements with their last frame, and torchrun's ChildFailedError summary.

Everything here is linear in the input and avoids per-line regex work for lines that cannot matter:
:func:`candidate_lines` finds interesting lines with ``str.find`` over the lower-cased text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from gpudoctor.records.explain import ExtractedError, LauncherFailure

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# [rank3]: (PyTorch >= 2.2), [default3]: (torchrun --tee / log prefix), [1,3]<stdout>: (mpirun),
# rank3: , "3: " (srun -l); an optional "[12345] " line counter in front of them.
_RANK_PREFIX = re.compile(
    r"^(?:\[\d+\]\s*)?(?:\[(?:rank|default)(\d+)\]:\s?|\[\d+,(\d+)\]<std(?:out|err)>:\s?"
    r"|rank(\d+):\s|(\d{1,4}): (?=\S))"
)
_RANK_IN_MESSAGE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
_EXCEPTION = re.compile(
    r"^\s*(?:(?:\w+ )?what\(\):\s+)?"
    r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))"
    r"(?::\s*(?P<msg>.*))?$"
)
_WARNING = re.compile(r"(?P<file>[^\s:]+\.py):(?P<line>\d+): (?P<type>\w*Warning): (?P<msg>.*)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_DIGITS = re.compile(r"\d+")

# literals that make a line worth a look by the extractor, on top of the catalog's triggers
EXTRACT_TRIGGERS = (
    "error:", "exception:", "failure:", "warning: ", "what():", "exit:",
    "root cause (first observed failure)", "failed (exitcode",
)

_TRACEBACK_LOOKBACK = 400


def split_lines(text: str) -> list[str]:
    """Lines without ANSI colour codes or carriage returns (progress bars rewrite lines with \\r)."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    lines = text.splitlines()
    if "\r" in text:
        lines = [line.rsplit("\r", 1)[-1] if "\r" in line else line for line in lines]
    return lines


# A notebook's traceback (IPython/Jupyter) lists the source around each frame: "    160     msg = ...",
# "--> 162     torch._C._cuda_init()", "----> 1 torch.cuda.current_device()"; rich's boxed traceback
# (transformers, accelerate, typer) likewise: "│   2587 │   │   with ...", "│ ❱ 2588 │   │   loss = ...".
# Such a line is the program's code, not what it printed: a message quoted in it (torch's own
# "Cannot re-initialize CUDA in forked subprocess" literal next to _lazy_init) is no evidence.
_NOTEBOOK_MARKERS = ("<ipython-input-", "Cell In[", "/ipykernel_", "\\ipykernel_")
_NOTEBOOK_LISTING = re.compile(r"^\s*(?:-+>\s*)?\d+ (?! *[:%|/])")
_RICH_LISTING = re.compile(r"^│\s+(?:❱\s+)?\d+\s+│")


def blank_source_listings(text: str, lines: list[str]) -> list[str]:
    """``lines`` with the source listings of notebook and rich tracebacks blanked (indexes kept)."""
    notebook = any(m in text for m in _NOTEBOOK_MARKERS)
    rich = "│" in text
    if not notebook and not rich:
        return lines
    out = list(lines)
    for i, line in enumerate(lines):
        if notebook and _NOTEBOOK_LISTING.match(line):
            out[i] = ""
        elif rich and line[:1] == "│" and _RICH_LISTING.match(line):
            out[i] = ""
    return out


def strip_rank(line: str) -> tuple[int | None, str]:
    """``(rank, rest)``: the rank from a launcher prefix, else from ``[Rank N]`` in the message."""
    first = line[:1]
    if first == "[":
        # fast path for the common "[rank3]:" / "[default3]:" prefixes
        close = line.find("]:", 1, 20)
        if close != -1:
            tag = line[1:close]
            digits = tag[4:] if tag.startswith("rank") else tag[7:] if tag.startswith("default") else ""
            if digits.isdigit():
                rest = line[close + 2:]
                return int(digits), rest[1:] if rest.startswith(" ") else rest
    if first == "[" or first.isdigit() or first == "r":
        match = _RANK_PREFIX.match(line)
        if match:
            rank = next(int(g) for g in match.groups() if g is not None)
            return rank, line[match.end():]
    if "Rank " in line:
        inner = _RANK_IN_MESSAGE.search(line)
        if inner:
            return int(inner.group(1)), line
    return None, line


def _trie(words: Iterable[str]) -> str:
    """A regex alternation of ``words`` shaped as a prefix trie: the regex engine then rejects
    most positions after one or two characters instead of trying every word."""
    root: dict = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:
            return (body if len(branches) > 1 else "(?:" + body + ")") + "?"
        return body

    return build(root)


@functools.lru_cache(maxsize=8)
def _scanner(triggers: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str, tuple[str, ...]]]:
    pattern = re.compile(_trie(triggers))
    # the engine reports one (the longest) trigger per start position; shorter triggers that are
    # prefixes of it start there too
    prefixes = {w: tuple(t for t in triggers if w.startswith(t)) for w in triggers}
    return pattern, prefixes


_BLANK_DIGITS = bytes.maketrans(b"0123456789", b"##########")


def _blank_digits(text: str) -> str:
    """ASCII digits -> '#'. ``bytes.translate`` runs at memory speed whatever the text holds;
    ``str.translate`` drops to a per-character path on non-ASCII text (5.5 s on 50 MB with 'İ')."""
    return text.encode("utf-8", "surrogatepass").translate(_BLANK_DIGITS).decode("utf-8", "surrogatepass")


def candidate_lines(lines: list[str], triggers: Iterable[str]) -> dict[int, set[str]]:
    """``{line index: trigger literals it contains}`` for every line containing any trigger
    (case-insensitive), in line order. Triggers must not contain digits or '#'.

    Logs repeat themselves (progress bars, per-step metrics, NCCL INFO lines differ only in
    numbers), so lines are first de-duplicated with their digits blanked; one regex pass (a prefix
    trie of all literals) then scans only the distinct lines, at C speed.
    """
    pattern, prefixes = _scanner(tuple(sorted(set(triggers))))
    keys = _blank_digits("\n".join(lines)).split("\n")
    distinct = list(dict.fromkeys(keys))
    # lower-casing may change a line's length ('İ' -> 'i̇') but never adds or removes a newline,
    # so counting newlines in the lowered text still says which distinct line a hit is on
    low = "\n".join(distinct).lower()
    per_key: dict[str, set[str]] = {}
    search = pattern.search
    count = low.count
    index = last = 0
    match = search(low)
    while match is not None:
        start = match.start()
        index += count("\n", last, start)  # which distinct line: newlines since the last hit
        last = start
        per_key.setdefault(distinct[index], set()).update(prefixes[match.group()])
        match = search(low, start + 1)
    if not per_key:
        return {}
    return {i: per_key[key] for i, key in enumerate(keys) if key in per_key}


def normalise(message: str) -> str:
    """Key for de-duplicating the same error across ranks: numbers (pids, sizes, ranks) blanked."""
    return _DIGITS.sub("#", " ".join(message.split()))


_LIBRARY_DIRS = ("site-packages", "dist-packages", "<frozen", "/lib/python3")


def _last_frame(lines: list[str], index: int, rank: int | None) -> str:
    """The innermost 'File "x", line N' above ``index`` in the same rank's traceback, preferring
    the user's own code over library frames (torch's internals rarely need editing)."""
    stop = max(0, index - _TRACEBACK_LOOKBACK)
    innermost = ""
    for j in range(index - 1, stop - 1, -1):
        line_rank, body = strip_rank(lines[j])
        if rank is not None and line_rank is not None and line_rank != rank:
            continue
        if body.startswith("Traceback (most recent call last)"):
            break
        frame = _FRAME.match(body)
        if frame:
            where = f"{frame['file']}:{frame['line']}"
            if not any(d in frame["file"] for d in _LIBRARY_DIRS):
                return where
            innermost = innermost or where
        elif _EXCEPTION.match(body) and j < index - 1:
            break  # the previous error's block: this one has no traceback of its own
    return innermost


_EXCEPTION_HINTS = ("Error", "Exception", "Exit", "Interrupt", "Failure")
_HINT = re.compile("|".join(_EXCEPTION_HINTS))  # one C-level scan instead of five ``in`` tests


def extract_errors(
    lines: list[str], parsed: dict[int, tuple[int | None, str]], limit: int = 50
) -> list[ExtractedError]:
    """Error statements (``SomeError: message``, ``what(): ...``, ``file.py:N: XWarning: ...``) among
    the ``parsed`` lines (``{index: (rank, body)}``), de-duplicated across ranks and repeats, in
    order of first appearance."""
    seen: dict[tuple[str, str], dict] = {}
    memo: dict[str, tuple[str, str, str] | None] = {}
    for index, (rank, body) in parsed.items():
        if body in memo:
            found = memo[body]
        else:
            found = None
            if _HINT.search(body):
                match = _EXCEPTION.match(body)
                # torchrun's ChildFailedError is summarised by parse_launcher, not listed here
                if match and not match["type"].endswith(("SystemExit", "ChildFailedError")):
                    found = (match["type"], (match["msg"] or "").strip(), "")
            if found is None and "Warning: " in body and ".py:" in body:
                warning = _WARNING.search(body)
                if warning:
                    found = (warning["type"], warning["msg"].strip(),
                             f"{warning['file']}:{warning['line']}")
            memo[body] = found
        if found is None:
            continue
        kind, message, frame = found
        key = (kind, normalise(message))
        item = seen.get(key)
        if item is None:
            if len(seen) >= limit:
                continue
            seen[key] = item = {
                "exception_type": kind,
                "message": message[:500],
                "last_frame": frame or _last_frame(lines, index, rank),
                "ranks": set(),
                "line_no": index + 1,
                "occurrences": 0,
            }
        item["occurrences"] += 1
        if rank is not None:
            item["ranks"].add(rank)
    return [
        ExtractedError(
            exception_type=item["exception_type"],
            message=item["message"],
            last_frame=item["last_frame"],
            ranks=tuple(sorted(item["ranks"])),
            line_no=item["line_no"],
            occurrences=item["occurrences"],
        )
        for item in seen.values()
    ]


_ROOT_CAUSE = "Root Cause (first observed failure)"
_FIELD = re.compile(r"^\s*(?P<key>rank|exitcode|traceback|error_file)\s*:\s*(?P<value>.*)$")
_LOCAL = re.compile(r"^(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local>-?\d+)\)")
_EXITCODE = re.compile(r"^(?P<code>-?\d+)")
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: \d+\)"
)


def parse_launcher(lines: list[str], indexes: Iterable[int] | None = None) -> LauncherFailure | None:
    """torchrun's root-cause block (``ChildFailedError``), or its one-line 'failed (exitcode: ...)'
    message when the block is absent."""
    search = range(len(lines)) if indexes is None else indexes
    fallback: LauncherFailure | None = None
    for index in search:
        line = lines[index]
        if _ROOT_CAUSE in line:
            fields: dict[str, str] = {}
            for follow in lines[index + 1 : index + 16]:
                field = _FIELD.match(follow)
                if field and field["key"] not in fields:
                    fields[field["key"]] = field["value"].strip()
                if follow.startswith("=" * 10):
                    break
            rank = local = code = None
            if "rank" in fields and (m := _LOCAL.match(fields["rank"])):
                rank, local = int(m["rank"]), int(m["local"])
            if "exitcode" in fields and (m := _EXITCODE.match(fields["exitcode"])):
                code = int(m["code"])
            return LauncherFailure(rank=rank, local_rank=local, exitcode=code,
                                   detail=fields.get("traceback", "")[:300])
        if fallback is None and "failed (exitcode" in line:
            agent = _AGENT_FAILED.search(line)
            if agent:
                fallback = LauncherFailure(rank=None, local_rank=int(agent["local"]),
                                           exitcode=int(agent["code"]))
    return fallback

"""Log parsing pieces: rank prefixes, the candidate-line scan, OOM numbers and their checks."""

from __future__ import annotations

import pytest

from gpudoctor.explain.facts import oom_fragmentation, oom_other_processes, parse_oom
from gpudoctor.explain.logparse import candidate_lines, extract_errors, parse_launcher, strip_rank

GIB = 2**30


@pytest.mark.parametrize(
    "line,rank,rest",
    [
        ("[rank3]: RuntimeError: x", 3, "RuntimeError: x"),
        ("[rank12]:[E626 06:24:44.903 ProcessGroupNCCL.cpp:616] y", 12, "[E626 06:24:44.903 ProcessGroupNCCL.cpp:616] y"),
        ("[default1]:Traceback (most recent call last):", 1, "Traceback (most recent call last):"),
        ("[1,3]<stderr>:RuntimeError: x", 3, "RuntimeError: x"),
        ("7: RuntimeError: x", 7, "RuntimeError: x"),
        ("[80746] [rank0]:[E321 02:07:08] z", 0, "[E321 02:07:08] z"),
        ("[E ProcessGroupNCCL.cpp:737] [Rank 5] Watchdog caught", 5, "[E ProcessGroupNCCL.cpp:737] [Rank 5] Watchdog caught"),
        ("16:35:16 INFO     iteration=865 loss=nan", None, "16:35:16 INFO     iteration=865 loss=nan"),
        ("RuntimeError: x", None, "RuntimeError: x"),
    ],
)
def test_strip_rank(line: str, rank: int | None, rest: str) -> None:
    assert strip_rank(line) == (rank, rest)


def test_candidate_lines_finds_every_trigger_including_overlaps() -> None:
    lines = ["nothing here", "CUDA error: out of memory", "x OUT OF MEMORY y", "error: out of"]
    found = candidate_lines(lines, ["cuda error: out of memory", "out of memory", "error:", "memory"])
    assert sorted(found) == [1, 2, 3]
    assert found[1] == {"cuda error: out of memory", "out of memory", "error:", "memory"}
    assert found[2] == {"out of memory", "memory"}


def test_extracted_errors_keep_the_innermost_frame_of_their_own_rank() -> None:
    lines = [
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "a.py", line 1, in <module>',
        '[rank1]:   File "b.py", line 2, in <module>',
        "[rank0]: ValueError: bad value 17",
        "[rank1]: ValueError: bad value 18",
    ]
    parsed = {i: strip_rank(line) for i, line in enumerate(lines)}
    errors = extract_errors(lines, parsed)
    assert len(errors) == 1  # numbers differ, the error is the same
    assert errors[0].ranks == (0, 1) and errors[0].occurrences == 2
    assert errors[0].last_frame == "a.py:1"


def test_launcher_one_line_fallback() -> None:
    lines = ["E0325 api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: /usr/bin/python"]
    failure = parse_launcher(lines)
    assert failure is not None and failure.exitcode == -9 and failure.local_rank == 5


def test_parse_oom_old_and_new_wording() -> None:
    old = parse_oom("CUDA out of memory. Tried to allocate 2.93 GiB (GPU 0; 23.80 GiB total capacity; "
                    "12.04 GiB already allocated; 2.82 GiB free; 19.69 GiB reserved in total by PyTorch)")
    assert old is not None
    assert round(old.requested / GIB, 2) == 2.93
    assert round(old.reserved_unallocated / GIB, 2) == 7.65
    new = parse_oom("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
                    "4.00 GiB of which 2.35 GiB is free. Of the allocated memory 825.15 MiB is allocated "
                    "by PyTorch, and 24.85 MiB is reserved by PyTorch but unallocated.")
    assert new is not None and new.total == 4 * GIB
    assert round(new.reserved_unallocated / 2**20, 2) == 24.85


@pytest.mark.parametrize(
    "text,expected",
    [
        # 0.03 GiB cached, 38 MiB requested: a plain OOM
        ("Tried to allocate 38.00 MiB (GPU 0; 4.00 GiB total capacity; 3.41 GiB already allocated; "
         "0 bytes free; 3.44 GiB reserved in total by PyTorch)", False),
        # 1.75 GiB cached but unusable for a 1.65 GiB request: fragmentation
        ("Tried to allocate 1.65 GiB (GPU 1; 7.79 GiB total capacity; 3.53 GiB already allocated; "
         "1.40 GiB free; 5.28 GiB reserved in total by PyTorch)", True),
        # 910 MiB cached, 158 MiB requested
        ("Tried to allocate 158.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 115.69 MiB is "
         "free. Of the allocated memory 22.14 GiB is allocated by PyTorch, and 910.35 MiB is reserved "
         "by PyTorch but unallocated.", True),
    ],
)
def test_fragmentation_threshold(text: str, expected: bool) -> None:
    passed, notes = oom_fragmentation(text)
    assert passed is expected
    assert notes and "reserved but unallocated" in notes[0]


def test_a_single_process_line_is_not_other_processes() -> None:
    single = ("Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 44.53 GiB of which 187.94 MiB "
              "is free. Process 3909982 has 44.34 GiB memory in use.")
    assert oom_other_processes(single)[0] is False


# modelscope/ms-swift#6301 (held-out set): three sibling ranks' 474 MiB contexts on the GPU, but the
# 4.35 GiB request would not have fitted without them either; 8.56 GiB sits reserved-but-unallocated
ZERO3_RANK11 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.35 GiB. GPU 3 has a total capacity "
    "of 63.42 GiB of which 1.70 GiB is free. Process 2521735 has 474.00 MiB memory in use. Including "
    "non-PyTorch memory, this process has 60.30 GiB memory in use. Process 2521734 has 474.00 MiB "
    "memory in use. Process 2521733 has 474.00 MiB memory in use. Of the allocated memory 50.94 GiB is "
    "allocated by PyTorch, and 8.56 GiB is reserved by PyTorch but unallocated."
)


def test_other_processes_that_could_not_have_made_room_are_not_the_cause() -> None:
    passed, notes = oom_other_processes(ZERO3_RANK11)
    assert passed is False
    assert "3 other process(es) hold 1.39 GiB" in notes[0] and "< the 4.35 GiB requested" in notes[0]
    assert oom_fragmentation(ZERO3_RANK11)[0] is True


def test_other_processes_whose_memory_would_have_fitted_the_request_are_the_cause() -> None:
    text = ZERO3_RANK11.replace("474.00 MiB", "4.00 GiB")
    assert oom_other_processes(text)[0] is True

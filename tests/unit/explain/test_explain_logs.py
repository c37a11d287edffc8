"""Root-cause extraction from realistic multi-rank logs (tests/fixtures/explain/*.log)."""

from __future__ import annotations

import sys

import pytest

from gpudoctor.explain import explain_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .conftest import EXPLAIN_FIXTURES, fixture_text

EXPECTED = tomllib.loads((EXPLAIN_FIXTURES / "expected.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_fixture_root_causes(case: str) -> None:
    expected = EXPECTED[case]
    report = explain_text(fixture_text(f"{case}.log"))
    roots = [m.entry_id for m in report.matches if m.role == "root"]
    secondary = {m.entry_id for m in report.matches if m.role == "secondary"}
    assert roots == expected["roots"]
    assert secondary == set(expected["secondary"])
    if "launcher_rank" in expected:
        assert report.launcher is not None and report.launcher.rank == expected["launcher_rank"]
    if expected.get("root_ranks"):
        assert list(report.matches[0].ranks) == expected["root_ranks"]
    # roots always come before consequences
    roles = [m.role for m in report.matches]
    assert roles == sorted(roles, key=lambda r: r != "root")


def test_every_fixture_cites_its_sources() -> None:
    for log in EXPLAIN_FIXTURES.glob("*.log"):
        header = [l for l in log.read_text(encoding="utf-8").splitlines() if l.startswith("#")]
        # a public thread (owner/repo#N) for copied texts, or the run that produced a real log
        assert any(("#" in line[1:] and "/" in line) or "real output of torch" in line
                   for line in header), log.name


def test_identical_errors_on_many_ranks_are_one_match_with_their_ranks() -> None:
    report = explain_text(fixture_text("nccl_duplicate_gpu_launch.log"))
    dup = report.matches[0]
    assert dup.entry_id == "nccl-duplicate-gpu"
    assert dup.ranks == (0, 1, 2, 3) and dup.occurrences == 4
    extracted = [e for e in report.extracted if e.exception_type.endswith("DistBackendError")]
    assert len(extracted) == 1 and extracted[0].ranks == (0, 1, 2, 3)


def test_crash_is_root_even_when_the_timeout_comes_first_in_the_text() -> None:
    timeout = ("[rank0]:[E ProcessGroupNCCL.cpp:737] [Rank 0] Watchdog caught collective operation "
               "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 "
               "milliseconds before timing out.")
    crash = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"
    report = explain_text(f"{timeout}\n{timeout}\n{crash}\n")
    assert [m.entry_id for m in report.matches] == ["illegal-memory-access", "nccl-watchdog-timeout"]
    assert report.matches[0].ranks == (3,)


def test_only_consequences_are_still_reported() -> None:
    report = explain_text(
        "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 "
        "milliseconds before timing out."
    )
    assert [m.entry_id for m in report.matches] == ["nccl-watchdog-timeout"]
    assert report.matches[0].ranks == (1,)  # from "[Rank 1]" inside the message


def test_launcher_rank_breaks_ties_between_root_errors() -> None:
    text = "\n".join([
        "[rank0]: RuntimeError: Default process group has not been initialized, please make sure to call init_process_group.",
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 2 (local_rank: 2)",
        "  exitcode  : 1 (pid: 77)",
        "=" * 60,
    ])
    report = explain_text(text)
    assert report.launcher is not None and report.launcher.rank == 2
    assert report.matches[0].entry_id == "illegal-memory-access"


def test_warnings_rank_after_errors() -> None:
    text = (
        "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch "
        "1.1.0 and later, you should call them in the opposite order\n"
        "ValueError: Attempting to unscale FP16 gradients.\n"
    )
    assert [m.entry_id for m in explain_text(text).matches] == [
        "unscale-fp16-gradients", "scheduler-before-optimizer"]


def test_message_wrapped_over_lines_is_still_recognised() -> None:
    wrapped = ("RuntimeError: Expected to have finished reduction in the prior\n"
               "iteration before starting a new one. This error indicates that your module has\n"
               "parameters that were not used in producing loss.\n")
    assert explain_text(wrapped).matches[0].entry_id == "ddp-unused-parameters"


def test_unknown_text_is_reported_honestly_with_what_was_extracted() -> None:
    report = explain_text(fixture_text("unknown_keyerror.log"))
    assert report.matches == ()
    assert report.extracted[0].exception_type == "KeyError"
    assert report.extracted[0].message == "'480p'"
    assert report.extracted[0].last_frame.endswith("PairwiseImg_test_new.py:115")


def test_keyword_only_evidence_is_low_confidence() -> None:
    report = explain_text("getting a nan loss with fp16 after 3 epochs, any idea?")
    assert report.matches[0].entry_id == "nan-loss"
    assert report.matches[0].confidence < 0.5


def test_ansi_colours_and_carriage_returns_are_ignored() -> None:
    text = ("\x1b[31mEpoch 1: 10%|#  | 10/100\rEpoch 1: 20%|## | 20/100\x1b[0m\n"
            "\x1b[1;31mRuntimeError: CUDA error: device-side assert triggered\x1b[0m\n")
    report = explain_text(text)
    assert report.matches[0].entry_id == "device-side-assert"
    assert report.matches[0].matched_line == "RuntimeError: CUDA error: device-side assert triggered"


_BNB_WARNING = (
    "/usr/local/lib/python3.10/site-packages/bitsandbytes/cextension.py:34: UserWarning: The installed "
    "version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, "
    "and GPU quantization are unavailable.\n"
    '  warn("The installed version of bitsandbytes was compiled without GPU support. "\n'
)


def test_a_harmless_import_warning_ranks_below_the_error_that_stopped_the_run() -> None:
    oom = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
           "    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
           "GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    report = explain_text(_BNB_WARNING + oom)
    ids = [m.entry_id for m in report.matches]
    assert ids[0].startswith("oom-") and "bitsandbytes-native-library" in ids[1:]
    bnb = next(m for m in report.matches if m.entry_id == "bitsandbytes-native-library")
    assert bnb.severity == "warning"


def test_the_same_entry_on_an_error_line_stays_an_error() -> None:
    failed = ("Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
              "    optimizer.step()\nNameError: name 'str2optimizer8bit_blockwise' is not defined\n")
    report = explain_text(_BNB_WARNING + failed)
    assert report.matches[0].entry_id == "bitsandbytes-native-library"
    assert report.matches[0].severity == "error"


def test_a_warning_that_is_the_failure_itself_keeps_its_rank() -> None:
    # torch's CUDA initialisation warning: CUDA is unusable from here on (no warning_alone reason)
    text = ("/usr/lib/python3/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: "
            "The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
            "driver.\n")
    report = explain_text(text)
    assert report.matches[0].entry_id == "driver-too-old" and report.matches[0].severity == "error"

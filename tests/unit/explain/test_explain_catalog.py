"""The catalog as data: schema, unique ids, real cited samples, and one test per entry that its own
samples rank it first."""

from __future__ import annotations

import re

import pytest

from gpudoctor.explain import explain_text, load_catalog, parse_catalog

CATALOG = load_catalog()
SAMPLES = [(entry.id, i, sample) for entry in CATALOG.entries for i, sample in enumerate(entry.samples)]

# what the issue and the seeds require the catalog to know (ids are the catalog's)
REQUIRED = {
    "oom-caching-allocator", "oom-fragmentation", "cuda-error-out-of-memory", "oom-nccl",
    "oom-shared-gpu", "gpu-memory-leak", "device-side-assert", "tensors-on-different-devices",
    "cuda-library-not-found", "driver-too-old", "no-kernel-image", "no-nvidia-driver",
    "torch-not-compiled-with-cuda", "nccl-system-error", "nccl-unhandled-cuda-error",
    "nccl-watchdog-timeout", "rendezvous-unreachable", "address-in-use",
    "dataloader-shared-memory", "dataloader-worker-segfault", "dataloader-worker-killed",
    "too-many-open-files", "ddp-unused-parameters", "backward-twice", "no-grad-fn",
    "unscale-fp16-gradients", "unscale-called-twice", "scheduler-before-optimizer",
    "dtype-mismatch", "nan-loss", "nan-in-backward", "illegal-memory-access",
    "cublas-status-error", "cudnn-status-error", "state-dict-module-prefix",
    "process-group-not-initialized", "torch-load-weights-only", "compile-recompile-limit",
    "nccl-duplicate-gpu", "low-gpu-utilization", "training-slows-down", "multi-gpu-no-speedup",
    "distributed-launch-deprecated", "ddp-device-ids", "cuda-tensor-to-numpy",
}


def test_catalog_is_large_and_covers_the_required_failures() -> None:
    ids = {e.id for e in CATALOG.entries}
    assert len(CATALOG.entries) >= 45
    assert REQUIRED <= ids, sorted(REQUIRED - ids)


def test_ids_are_unique_and_every_entry_is_complete() -> None:
    ids = [e.id for e in CATALOG.entries]
    assert len(ids) == len(set(ids))
    for entry in CATALOG.entries:
        assert entry.samples, entry.id
        assert all(re.match(r"^[\w.-]+/[\w.-]+#\d+$|^https?://", s.source) for s in entry.samples)
        assert all(link.startswith("https://") for link in entry.links), entry.id
        assert entry.verify and entry.fix and len(entry.cause) > 40, entry.id


@pytest.mark.parametrize(
    "entry_id,index,sample", SAMPLES, ids=[f"{e}[{i}]" for e, i, _ in SAMPLES]
)
def test_each_sample_ranks_its_own_entry_first(entry_id: str, index: int, sample) -> None:
    report = explain_text(sample.text)
    assert report.matches, f"{entry_id}: nothing matched its sample from {sample.source}"
    assert report.matches[0].entry_id == entry_id, (
        f"{entry_id}: sample from {sample.source} ranked "
        f"{[m.entry_id for m in report.matches]}"
    )
    assert report.matches[0].confidence >= 0.8


def _toml(**overrides: str) -> dict[str, str]:
    fields = {
        "id": '"a-b"', "title": '"t"', "category": '"memory"', "anchors": '["x"]',
        "patterns": "['''x''']", "cause": '"c"', "verify": '["v"]', "fix": '["f"]',
        "links": '["https://example.org"]',
    }
    fields.update(overrides)
    body = "\n".join(f"{k} = {v}" for k, v in fields.items())
    sample = '\n[[entry.samples]]\ntext = "x"\nsource = "o/r#1"\n'
    return {"t.toml": f"[[entry]]\n{body}\n{sample}"}


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"patterns": "['''(unclosed''']"}, "bad pattern"),
        ({"id": '"Not_Kebab"'}, "kebab-case"),
        ({"role": '"primary"'}, "role must be"),
        ({"check": '"no_such_check"'}, "unknown check"),
        ({"anchors": '["Upper"]'}, "lower-case"),
        ({"overrides": '["missing-id"]'}, "overrides unknown"),
    ],
)
def test_invalid_entries_are_rejected_with_the_reason(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_catalog(_toml(**overrides))


def test_sample_source_is_required_and_ids_unique() -> None:
    no_source = _toml()
    no_source["t.toml"] = no_source["t.toml"].replace('source = "o/r#1"', 'source = "somewhere"')
    with pytest.raises(ValueError, match="must be 'owner/repo#N'"):
        parse_catalog(no_source)
    twice = _toml()["t.toml"]
    with pytest.raises(ValueError, match="unique"):
        parse_catalog({"a.toml": twice, "b.toml": twice})


def test_a_custom_catalog_is_used_when_given() -> None:
    catalog = parse_catalog(_toml(patterns="['''frobnicate failed''']", anchors='["frobnicate"]'))
    report = explain_text("x\nRuntimeError: frobnicate failed\n", catalog=catalog)
    assert [m.entry_id for m in report.matches] == ["a-b"]


# nvidia-smi dmon's -s letters: u = utilization, t = PCIe rx/tx throughput, p = power/temperature,
# m = memory, c = clocks, e = ECC/PCIe replay (nvidia-smi dmon --help)
DMON_SELECT = {"u": ("util",), "t": ("rx/tx", "pcie", "throughput"), "p": ("power", "temperature"),
               "c": ("clock",), "m": ("fb ", "framebuffer")}


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.id)
def test_dmon_commands_select_the_metrics_their_text_reads(entry) -> None:
    """A `nvidia-smi dmon -s X` hint that reads rx/tx must select t, one that reads util u, ..."""
    for text in (entry.cause, *entry.verify, *entry.fix):
        for letters in re.findall(r"nvidia-smi dmon -s (\w+)", text):
            rest = text.lower().split("dmon -s", 1)[1]
            for letter, words in DMON_SELECT.items():
                if any(w in rest for w in words):
                    assert letter in letters, f"{entry.id}: {text!r} reads {words[0]} without -s {letter}"

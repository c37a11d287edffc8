"""Every configuration field is type-checked, in Python and from files; each error names the
key, the value and what is accepted."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from gpudoctor.train import (CheckpointConfig, LogConfig, ParallelConfig, PerfConfig, PrecisionConfig, RobustConfig,
                             TrainConfig)

NAN, INF = math.nan, math.inf

# (section, field, bad value, what the message must say) - at least one per field
CASES = [
    ("", "device", 0, r"device=0: expected a string"),
    ("", "batch_size", True, r"batch_size=True: expected a whole number \(int\), not a bool"),
    ("", "batch_size", "64", r"batch_size='64': expected a whole number"),
    ("", "batch_size", 64.0, r"batch_size=64.0: expected a whole number"),
    ("", "grad_accum_steps", 2.5, r"grad_accum_steps=2.5: expected a whole number"),
    ("", "max_steps", "100", r"max_steps='100': expected a whole number"),
    ("", "seed", 1.5, r"seed=1.5: expected a whole number"),
    ("", "lr_scaling", True, r"lr_scaling=True is not valid; use one of: none, linear, sqrt"),
    ("", "base_batch_size", False, r"base_batch_size=False: expected a whole number .*not a bool"),
    ("", "precision", "fp32", r"precision='fp32' is a str but precision is a section: give a PrecisionConfig "
                              r"\(a \[precision\] table in a file\); e.g. precision=PrecisionConfig\(dtype='fp32'\)"),
    ("", "parallel", "ddp", r"parallel='ddp' is a str but parallel is a section.*strategy='ddp'"),
    ("", "perf", True, r"perf=True is a bool but perf is a section: give a PerfConfig"),
    ("", "checkpoint", "ckpt", r"checkpoint='ckpt' is a str .*dir='ckpt'"),
    ("", "robust", 1, r"robust=1 is an int but robust is a section: give a RobustConfig"),
    ("", "log", None, r"log=None is a NoneType but log is a section"),
    ("precision", "dtype", "float32", r"precision.dtype='float32' is not valid; use one of: auto, fp32, tf32, bf16, fp16"),
    ("precision", "grad_clip_norm", NAN, r"precision.grad_clip_norm=nan: expected a finite number"),
    ("precision", "grad_clip_norm", INF, r"precision.grad_clip_norm=inf: expected a finite number"),
    ("precision", "grad_clip_norm", "1.0", r"precision.grad_clip_norm='1.0': expected a number"),
    ("precision", "init_scale", INF, r"precision.init_scale=inf: expected a finite number"),
    ("precision", "growth_interval", 100.5, r"precision.growth_interval=100.5: expected a whole number"),
    ("parallel", "strategy", None, r"parallel.strategy=None is not valid; use one of"),
    ("parallel", "bucket_cap_mb", NAN, r"parallel.bucket_cap_mb=nan: expected a finite number"),
    ("parallel", "gradient_as_bucket_view", 1, r"parallel.gradient_as_bucket_view=1: expected true or false"),
    ("parallel", "static_graph", "yes", r"parallel.static_graph='yes': expected true or false"),
    ("parallel", "find_unused_parameters", 0, r"parallel.find_unused_parameters=0: expected true or false"),
    ("parallel", "fsdp_shard_modules", "Block", r"parallel.fsdp_shard_modules='Block': expected a list of names"),
    ("parallel", "timeout_s", INF, r"parallel.timeout_s=inf: expected a finite number"),
    ("parallel", "comm_hook", False, r"parallel.comm_hook=False is not valid; use one of: none, fp16, bf16"),
    ("parallel", "sync_batchnorm", "yes", r"parallel.sync_batchnorm='yes': expected true or false"),
    ("perf", "compile", "true", r"perf.compile='true': expected true or false"),
    ("perf", "compile_mode", 1, r"perf.compile_mode=1: expected a string"),
    ("perf", "channels_last", "auto", r"perf.channels_last='auto': expected true or false or leave it out"),
    ("perf", "cudnn_benchmark", None, r"perf.cudnn_benchmark=None: expected true or false"),
    ("perf", "activation_checkpointing", [1], r"perf.activation_checkpointing=\[1\]: expected a list of names"),
    ("perf", "deterministic", 1, r"perf.deterministic=1: expected true or false"),
    ("perf", "deterministic_warn_only", "no", r"perf.deterministic_warn_only='no': expected true or false"),
    ("checkpoint", "dir", 3, r"checkpoint.dir=3: expected a string or leave it out"),
    ("checkpoint", "every_steps", 2.5, r"checkpoint.every_steps=2.5: expected a whole number"),
    ("checkpoint", "keep_last", 1.5, r"checkpoint.keep_last=1.5: expected a whole number"),
    ("checkpoint", "resume", True, r"checkpoint.resume=True is not valid; use one of: auto, never"),
    ("robust", "oom_recover", "on", r"robust.oom_recover='on': expected true or false or leave it out"),
    ("robust", "min_micro_batch", True, r"robust.min_micro_batch=True: expected a whole number .*not a bool"),
    ("robust", "nonfinite", 0, r"robust.nonfinite=0 is not valid; use one of: stop, skip, off"),
    ("robust", "max_skips", 10.0, r"robust.max_skips=10.0: expected a whole number"),
    ("robust", "oom_snapshot", None, r"robust.oom_snapshot=None is not valid; use one of: off, on_oom, always"),
    ("robust", "oom_dir", 5, r"robust.oom_dir=5: expected a string"),
    ("log", "every_steps", 0.5, r"log.every_steps=0.5: expected a whole number"),
    ("log", "progress_bar", "no", r"log.progress_bar='no': expected true or false"),
    ("log", "flops_per_sample", NAN, r"log.flops_per_sample=nan: expected a finite number"),
    ("log", "warmup_steps", 2.0, r"log.warmup_steps=2.0: expected a whole number"),
]
SECTIONS = {"precision": PrecisionConfig, "parallel": ParallelConfig, "perf": PerfConfig,
            "checkpoint": CheckpointConfig, "robust": RobustConfig, "log": LogConfig, "": TrainConfig}


def _ids(case):
    return f"{case[0] + '.' if case[0] else ''}{case[1]}={case[2]!r}"


def test_every_field_has_a_type_case():
    covered = {(s, f) for s, f, _, _ in CASES}
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            assert (section, field.name) in covered, f"no type-error case for {section}.{field.name}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_a_wrong_type_in_python_names_key_value_and_what_is_accepted(case):
    section, field, value, message = case
    with pytest.raises(ValueError, match=message):
        SECTIONS[section](**{field: value})


@pytest.mark.parametrize("case", [c for c in CASES if not (isinstance(c[2], float) and not math.isfinite(c[2]))
                                  and c[2] is not None], ids=_ids)
def test_a_wrong_type_in_a_json_file_gives_the_same_error(case, tmp_path: Path):
    section, field, value, message = case
    data = {section: {field: value}} if section else {field: value}
    path = tmp_path / "train.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_file(path)


@pytest.mark.parametrize("text,message", [
    ('precision = "fp32"\n', r"precision='fp32' is a str but precision is a section"),
    ("grad_accum_steps = 2.5\n", r"grad_accum_steps=2.5: expected a whole number"),
    ("batch_size = true\n", r"batch_size=True: expected a whole number \(int\), not a bool"),
    ("[precision]\ngrad_clip_norm = nan\n", r"precision.grad_clip_norm=nan: expected a finite number"),
    ("[precision]\ngrad_clip_norm = inf\n", r"precision.grad_clip_norm=inf: expected a finite number"),
    ('[perf]\nactivation_checkpointing = "Block"\n', r"perf.activation_checkpointing='Block': expected a list"),
])
def test_toml_type_errors(tmp_path: Path, text, message):
    path = tmp_path / "train.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_file(path)


def test_good_values_are_kept_and_normalised(tmp_path: Path):
    cfg = TrainConfig(batch_size=64, precision=PrecisionConfig(grad_clip_norm=1),  # an int is a number
                      parallel=ParallelConfig(fsdp_shard_modules=["Block"]),
                      checkpoint=CheckpointConfig(dir=tmp_path / "ckpt"))
    assert cfg.parallel.fsdp_shard_modules == ("Block",) and cfg.checkpoint.dir == str(tmp_path / "ckpt")
    assert cfg.precision.grad_clip_norm == 1 and hash(cfg)  # still frozen and hashable

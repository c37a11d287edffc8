"""``check --lock DIR``: requirements.lock and a Dockerfile built from a recorded environment
(``docs/examples/env-1gpu.json``, frozen on an H200 machine), linted; existing files refused."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.analysis.env_diff import KIND, freeze
from gpudoctor.analysis.env_lock import lock_files, torch_pin
from gpudoctor.cli.app import app
from gpudoctor.records.base import read_json, write_json
from gpudoctor.records.env import FrozenEnv

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
RECORDED = EXAMPLES / "env-1gpu.json"
runner = CliRunner()
# Dockerfile instructions (the Dockerfile reference); a parser directive or comment starts with #
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}


def lint_dockerfile(path: Path) -> list[str]:
    """hadolint when installed; else: FROM is the first instruction (only ARG may precede it),
    every instruction is a known one with arguments, continuations end, ENV is KEY="value"."""
    hadolint = shutil.which("hadolint")
    if hadolint:
        done = subprocess.run([hadolint, "--failure-threshold", "error", str(path)],
                              capture_output=True, text=True, check=False)
        return [done.stdout + done.stderr] if done.returncode else []
    problems, instructions, continued = [], [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if continued:
            continued = line.rstrip().endswith("\\")
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, args = line.strip().partition(" ")
        if word.upper() not in INSTRUCTIONS or word != word.upper():
            problems.append(f"line {n}: unknown instruction {word!r}")
        if not args.strip():
            problems.append(f"line {n}: {word} without arguments")
        if word == "ENV" and not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*="([^"\\]|\\.)*"', args):
            problems.append(f"line {n}: ENV is not KEY=\"value\": {args}")
        instructions.append(word.upper())
        continued = line.rstrip().endswith("\\")
    if continued:
        problems.append("the last line continues")
    first = [w for w in instructions if w != "ARG"][:1]
    if first != ["FROM"]:
        problems.append(f"the first instruction is {first}, not FROM")
    return problems


def test_lock_from_a_recorded_environment(tmp_path: Path) -> None:
    out = tmp_path / "rebuild"
    result = runner.invoke(app, ["check", "--lock", str(out), "--from", str(RECORDED)])
    assert result.exit_code == 0, result.output
    env = read_json(RECORDED, FrozenEnv, kind=KIND)
    lock = (out / "requirements.lock").read_text()
    lines = lock.splitlines()
    assert "torch==2.11.0+cu130" in lines  # the wheel variant suffix
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in lines  # its index
    # the only address written is PyTorch's index: pip's default index stays the user's own
    assert re.findall(r"\w+://\S+", lock) == ["https://download.pytorch.org/whl/cu130"]
    for name, version in env.packages.items():  # every recorded package, exactly
        if name != "torch":
            assert f"{name}=={version}" in lines
    assert [n for n in lines if n.startswith(("torch", "triton"))][:4] == [
        "torch==2.11.0+cu130", "torchvision==0.26.0", "torchaudio==2.11.0", "triton==3.6.0"]
    docker = out / "Dockerfile"
    assert "FROM pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime" in docker.read_text().splitlines()
    assert 'ENV NCCL_NVLS_ENABLE="0"' in docker.read_text()
    assert "NCCL_VERSION" not in docker.read_text().replace("# ", "")  # the image sets its own
    assert lint_dockerfile(docker) == []


def test_lock_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM mine\n")
    result = runner.invoke(app, ["check", "--lock", str(tmp_path), "--from", str(RECORDED)])
    assert result.exit_code == 2
    assert "already there" in result.output and "never overwrites" in result.output
    assert (tmp_path / "Dockerfile").read_text() == "FROM mine\n"
    assert not (tmp_path / "requirements.lock").exists()
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert runner.invoke(app, ["check", "--lock", str(a_file), "--from", str(RECORDED)]).exit_code == 2


def test_from_needs_lock_and_a_frozen_environment(tmp_path: Path) -> None:
    assert runner.invoke(app, ["check", "--from", str(RECORDED)]).exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = runner.invoke(app, ["check", "--lock", str(tmp_path / "x"), "--from", str(bad)])
    assert result.exit_code == 2 and not (tmp_path / "x").exists()


def test_a_record_without_torch_still_locks(facts_factory) -> None:
    env = freeze(facts_factory.cpu_only())
    env = dataclasses.replace(env, torch_version=None, torch_cuda=None, torch_variant=None)
    files = lock_files(env, ("rich>=13.0", "torch>=2.4; extra == 'torch'"))
    assert "torch was not installed" in files.requirements and "://" not in files.requirements
    assert "rich>=13.0" in files.requirements.splitlines()
    assert not files.image_exact


def test_lock_with_checked_facts(tmp_path: Path) -> None:
    """The probing path: --lock beside the check, here from recorded check facts."""
    out = tmp_path / "rebuild"
    result = runner.invoke(app, ["check", "--facts", str(EXAMPLES / "check-1gpu.json"), "--lock", str(out)])
    assert result.exit_code in (0, 1), result.output
    lock = (out / "requirements.lock").read_text()
    assert re.search(r"^torch==[\d.]+\+cu\d+$", lock, re.M)
    assert lint_dockerfile(out / "Dockerfile") == []


def test_a_cpu_build_falls_back_to_a_python_image(tmp_path: Path) -> None:
    env = dataclasses.replace(read_json(RECORDED, FrozenEnv, kind=KIND), torch_version="2.11.0+cpu",
                              torch_cuda=None, torch_variant="cpu", cudnn_version=None)
    files = lock_files(env)
    assert not files.image_exact and files.image == "python:3.12-slim"
    assert "fallback" in files.dockerfile
    assert torch_pin(env) == "torch==2.11.0+cpu"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in files.requirements
    path = tmp_path / "Dockerfile"
    path.write_text(files.dockerfile)
    assert lint_dockerfile(path) == []


def test_env_values_are_quoted(tmp_path: Path) -> None:
    env = read_json(RECORDED, FrozenEnv, kind=KIND)
    env = dataclasses.replace(env, env={"NCCL_DEBUG_SUBSYS": 'INIT,"x" $HOME'}, cudnn_version=None)
    files = lock_files(env)
    assert 'ENV NCCL_DEBUG_SUBSYS="INIT,\\"x\\" \\$HOME"' in files.dockerfile
    assert "cudnn9-runtime" in files.image and "cuDNN was not recorded" in files.dockerfile
    path = tmp_path / "Dockerfile"
    path.write_text(files.dockerfile)
    assert lint_dockerfile(path) == []


def test_the_linter_catches_a_broken_dockerfile(tmp_path: Path) -> None:
    if shutil.which("hadolint"):
        pytest.skip("hadolint lints")
    path = tmp_path / "Dockerfile"
    path.write_text("RUN echo\nFROM x\nCOPPY a b\n")
    assert len(lint_dockerfile(path)) == 2

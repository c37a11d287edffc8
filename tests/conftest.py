"""Shared test fixtures: golden files, environment hygiene, leaked-thread and process-group checks."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

GOLDENS = Path(__file__).parent / "goldens"
FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(Path(__file__).parent / "support"))  # test-support modules

import gpu_log  # noqa: E402 - from support/, put on the path just above


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite golden files from the current output instead of comparing.",
    )
    gpu_log.add_option(parser)  # --gpu-log DIR: keep a log of the GPU tier to commit


def pytest_configure(config: pytest.Config) -> None:
    gpu_log.configure(config)


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """Compare text with ``tests/goldens/<name>``; ``pytest --update-goldens`` rewrites it."""
    update = request.config.getoption("--update-goldens")

    def check(name: str, actual: str) -> None:
        path = GOLDENS / name
        if update or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual, encoding="utf-8")
            if not update:
                pytest.fail(f"golden {name} did not exist; wrote it — review and commit it")
            return
        expected = path.read_text(encoding="utf-8")
        assert actual == expected, f"output differs from golden {name}; run pytest --update-goldens after review"

    return check


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _restore_environ():
    """Tests may set environment variables; put them back afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _no_leaked_threads_or_groups():
    """Fail a test that leaves a non-daemon thread running or a process group initialised."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [
        t for t in threading.enumerate()
        if t.ident not in before and t.is_alive() and not t.daemon
    ]
    assert not leaked, f"test left threads running: {[t.name for t in leaked]}"
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        pytest.fail("test left a torch.distributed process group initialised")

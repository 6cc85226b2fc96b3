"""Shared fixtures: real vLLM sources (downloaded once, cached under ~/.cache/specguard) and a CLI runner."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("SPECGUARD_TEST_CACHE", Path.home() / ".cache" / "specguard"))
REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def _alone(name: str) -> Iterator[None]:
    """One test process at a time fetches or unpacks a release (pytest -n runs several): the others wait for it
    rather than read files it is still writing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _wheel(version: str) -> Path:
    wheels = CACHE / "wheels"
    with _alone(f"wheel-{version}"):
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
        if not found:
            wheels.mkdir(parents=True, exist_ok=True)
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
            subprocess.run([*pip, f"vllm=={version}", "-d", str(wheels)], check=True)
            found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    return found[0]


def unpacked_vllm(version: str) -> Path:
    """The `vllm/` package folder of a release, only its Python files: what the analyzer reads."""
    target = CACHE / "vllm-src" / version
    done = target / ".complete"
    if not done.exists():
        wheel_file = _wheel(version)
        with _alone(f"src-{version}"):
            if not done.exists():
                with zipfile.ZipFile(wheel_file) as wheel:
                    for name in wheel.namelist():
                        if name.startswith("vllm/") and name.endswith(".py"):
                            wheel.extract(name, target)
                done.touch()
    return target / "vllm"


@pytest.fixture(scope="session")
def vllm_source() -> Callable[[str], Path]:
    return unpacked_vllm


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m specguard ARGS` as a user runs it: a separate process, so exit codes and stderr are real."""
    return subprocess.run(
        [sys.executable, "-m", "specguard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess]:
    return run_cli

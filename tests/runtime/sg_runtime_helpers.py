"""Paths and subprocess helpers the runtime-guard tests share (a module, not conftest, so its name cannot clash)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def venv_python() -> str:
    return sys.executable


def run_in_venv(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """A script under the test venv's python in a process of its own; a failure fails the test with its stderr."""
    proc = subprocess.run(
        [venv_python(), "-W", "ignore", *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def old_vllm_path() -> str:
    """Where .ci/runtime-env.sh put vLLM 0.28.0's code (override with SPECGUARD_VLLM_OLD_PATH)."""
    default = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / "vllm-0.28.0"
    path = Path(os.environ.get("SPECGUARD_VLLM_OLD_PATH", default))
    assert (path / "vllm" / "__init__.py").is_file(), (
        f"vLLM 0.28.0 code not found at {path}; run .ci/runtime-env.sh first"
    )
    return str(path)

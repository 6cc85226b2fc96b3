"""Paths the runtime-guard tests share (a module, not conftest, so its name cannot clash)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def venv_python() -> str:
    return sys.executable


def old_vllm_path() -> str:
    """Where .ci/runtime-env.sh put vLLM 0.28.0's code (override with SPECGUARD_VLLM_OLD_PATH)."""
    default = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / "vllm-0.28.0"
    path = Path(os.environ.get("SPECGUARD_VLLM_OLD_PATH", default))
    assert (path / "vllm" / "__init__.py").is_file(), (
        f"vLLM 0.28.0 code not found at {path}; run .ci/runtime-env.sh first"
    )
    return str(path)

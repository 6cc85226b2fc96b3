"""`--vllm-version X` when pip cannot fetch X (issue 30): a release the package index does not have and an index that
cannot be reached are different mistakes with different fixes, so they get different one-line messages, exit 2.
pip runs for real, pointed by its own variables at a local wheel folder (a tiny wheel named vllm, never installed)
or at nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ARGS = ["--", "m", "-dp", "2"]


def _config(version: str, tmp_path: Path, pip_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(
        [sys.executable, "-m", "specguard", "config", "--vllm-version", version, *ARGS],
        capture_output=True,
        text=True,
        env={**env, **pip_env},
        timeout=600,
    )


def _wheel_folder(tmp_path: Path, *versions: str) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for version in versions:
        with zipfile.ZipFile(folder / f"vllm-{version}-py3-none-any.whl", "w") as wheel:
            wheel.writestr("vllm/__init__.py", "")
    return folder


def test_a_version_the_index_does_not_have_is_named_with_the_newest_it_has(tmp_path: Path) -> None:
    folder = _wheel_folder(tmp_path, "0.1.0", "0.2.0")
    proc = _config("0.99.0", tmp_path, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "vllm 0.99.0 is not a release pip can download" in line and "newest it has is 0.2.0" in line, line
    assert "offline" not in line


def test_an_index_with_no_vllm_at_all_is_told_as_such(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    proc = _config("0.33.0", tmp_path, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "lists no vllm release at all" in line and "offline" not in line and "--vllm-source" in line, line


def test_an_unreachable_index_is_told_as_offline(tmp_path: Path) -> None:
    unreachable = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "1", "PIP_TIMEOUT": "2"}
    proc = _config("0.33.0", tmp_path, unreachable)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "could not reach the package index (offline?): [Errno" in line and "Connection refused" in line, line

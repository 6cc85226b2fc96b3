"""A served source that is not vLLM (issue 26 item 9): a `vllm/` folder holding only `__init__.py`, random bytes in
every module, the config or engine-argument module emptied, another project's package named `vllm`. Whether given
as --vllm-source, found as the installed vllm or in the --vllm-version cache, it is refused with one line naming
what is missing, exit 2: before, each was "no hazards found", exit 0, even with --strict (hazards whose checks are
absent from a tree are not in it). A real release is judged as before, and a real release with one hazard's module
broken is judged with that hazard not judged (docs/security.md items 2-3, tests/deploy/test_config_hostile_source.py).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork

REPO = Path(__file__).resolve().parents[2]
ARGS = ["m", "-dp", "2"]


def _config(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "config", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def _only_init(tmp_path: Path, release: Path) -> Path:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    return tmp_path / "vllm"


def _random_bytes(tmp_path: Path, release: Path) -> Path:
    """The release's layout, every module random bytes (as many as the real one, up to 4 KiB)."""
    rng = random.Random(26)
    for path in release.rglob("*.py"):
        copy = tmp_path / "vllm" / path.relative_to(release)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(rng.randbytes(min(path.stat().st_size, 4096)))
    return tmp_path / "vllm"


def _emptied(*relpaths: str) -> Callable[[Path, Path], Path]:
    def make(tmp_path: Path, release: Path) -> Path:
        tree = fork(release, tmp_path)
        for relpath in relpaths:
            (tree / relpath).unlink()  # a hard link to the cached release: never written through
            (tree / relpath).write_text("")
        return tree

    return make


def _another_project(tmp_path: Path, release: Path) -> Path:
    """specguard's own package, named vllm: many modules, none of them vLLM's."""
    shutil.copytree(REPO / "specguard", tmp_path / "vllm", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "vllm"


# name -> (how the tree is made, what the one line names as missing)
NOT_VLLM = {
    "only-init": (_only_init, "engine/arg_utils.py"),
    "random-bytes-in-every-module": (_random_bytes, "engine/arg_utils.py"),
    "engine-args-emptied": (_emptied("engine/arg_utils.py"), "EngineArgs.add_cli_args"),
    "config-emptied": (_emptied("config/__init__.py"), "VllmConfig"),
    "both-emptied": (_emptied("engine/arg_utils.py", "config/__init__.py"), "EngineArgs.add_cli_args"),
    "another-project": (_another_project, "engine/arg_utils.py"),
}


def _assert_refused(proc: subprocess.CompletedProcess[str], missing: str) -> None:
    (line,) = proc.stderr.splitlines()
    assert line.startswith("specguard: error: ") and "not a vLLM source tree" in line and missing in line, line
    assert (proc.returncode, proc.stdout) == (2, "")


@pytest.mark.parametrize("strict", [[], ["--strict"]], ids=["plain", "strict"])
@pytest.mark.parametrize("case", sorted(NOT_VLLM))
def test_a_tree_that_is_not_vllm_is_refused_naming_what_is_missing(
    case: str, strict: list[str], tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    make, missing = NOT_VLLM[case]
    tree = make(tmp_path, source_dir("0.33.0"))
    _assert_refused(_config("--vllm-source", str(tree), *strict, "--", *ARGS), missing)


def test_an_installed_vllm_that_is_not_vllm_is_refused(tmp_path: Path) -> None:
    """The vllm Python would import (found, not imported) is judged by the same rule."""
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "__init__.py").write_text("")
    path = os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    _assert_refused(_config("--", *ARGS, env={"PYTHONPATH": path}), "engine/arg_utils.py")


def test_a_cached_release_that_is_not_vllm_is_refused(tmp_path: Path) -> None:
    """--vllm-version takes a complete folder of the user cache as it is: it is judged by the same rule."""
    cached = tmp_path / "xdg" / "specguard" / "vllm-src" / "9.9.9"
    (cached / "vllm").mkdir(parents=True)
    (cached / "vllm" / "__init__.py").write_text("")
    (cached / ".complete").touch()
    proc = _config("--vllm-version", "9.9.9", "--", *ARGS, env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    _assert_refused(proc, "engine/arg_utils.py")


def test_a_real_release_is_judged(tmp_path: Path, source_dir: Callable[[str], Path]) -> None:
    clean = _config("--vllm-source", str(source_dir("0.33.0")), "--", *ARGS)
    assert clean.returncode == 0 and "judged against vLLM 0.33.0" in clean.stdout, clean.stderr
    hazard = _config("--vllm-source", str(source_dir("0.33.0")), "--", "m", "-tp", "2", "-dcp", "4")
    assert hazard.returncode == 1 and "decode-context-parallel-size=4: CFG105 error" in hazard.stdout


def test_a_real_release_with_a_hazards_module_unreadable_is_judged_without_that_hazard(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """config/parallel.py (where CFG105's check lives) is random bytes: the tree is still vLLM; CFG105 is not
    judged, naming the file, and what does not need it is judged (CFG112)."""
    tree = _emptied()(tmp_path, source_dir("0.33.0"))
    (tree / "config" / "parallel.py").unlink()
    (tree / "config" / "parallel.py").write_bytes(random.Random(3).randbytes(4096))
    proc = _config("--vllm-source", str(tree), "--", "m", "-tp", "2", "-dcp", "4", "--attention-backend", "NOPE")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "attention-backend=NOPE: CFG112 error" in out
    assert "CFG105 not judged: " in out and "config/parallel.py" in out.split("CFG105 not judged: ")[1]

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

# The one-minute tier (`pytest -m "not slow"`, the README's Quickstart): the analyzer's own tests, in one process,
# with no test venv, server or fresh venv (the dataflow tests read vLLM 0.28.0's source, fetched once). Everything
# else is marked `slow`, a new file too until it is listed here.
FAST = {
    "dataflow",
    "test_rule_examples.py",
    "test_source_text.py",
    "test_positions.py",
    "test_toml_nesting.py",
    "test_doc_figures.py",
    "test_bench_figures.py",
    "test_repository_check.py",
}


def _outside_the_tier(path: Path) -> bool:
    parts = path.relative_to(REPO / "tests").parts if path.is_relative_to(REPO / "tests") else ()
    return bool(parts) and parts[0] not in FAST


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # The tier's venv has no torch or vLLM, which some slow modules import as they load: not even collected there.
    if "not slow" in (config.getoption("markexpr", "") or "") and _outside_the_tier(collection_path):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(item.path).relative_to(REPO / "tests").parts
        if where[0] not in FAST:
            item.add_marker(pytest.mark.slow)


# Test files whose tests share session fixtures that cost minutes: under `--dist loadfile` (CI's), each folder here is
# one unit of work for one process, as a file is. The end-to-end files share the servers `scenario_run` starts (a
# minute or more each): spread over processes, each process started the servers its files use again.
TOGETHER = ("tests/e2e/",)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the one-minute tier's venv has no xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadfile":
        return None  # the mode asked for, as xdist makes it
    from xdist.scheduler import LoadFileScheduling

    class FilesAndFolders(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return next((folder for folder in TOGETHER if scope.startswith(folder)), scope)

    return FilesAndFolders(config, log)


@contextlib.contextmanager
def _alone(name: str) -> Iterator[None]:
    """One test process at a time fetches or unpacks a release (pytest -n runs several): the others wait for it
    rather than read files it is still writing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _wheel(version: str, package: str = "vllm") -> Path:
    wheels = CACHE / "wheels"
    with _alone(f"wheel-{package}-{version}"):
        found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
        if not found:
            wheels.mkdir(parents=True, exist_ok=True)
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
            subprocess.run([*pip, f"{package}=={version}", "-d", str(wheels)], check=True)
            found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
    return found[0]


def unpacked(package: str, version: str) -> Path:
    """The package folder of a release (`vllm/`, `sglang/`), only its Python files: what the analyzer reads."""
    target = CACHE / f"{package}-src" / version
    done = target / ".complete"
    if not done.exists():
        wheel_file = _wheel(version, package)
        with _alone(f"src-{package}-{version}"):
            if not done.exists():
                with zipfile.ZipFile(wheel_file) as wheel:
                    for name in wheel.namelist():
                        if name.startswith(f"{package}/") and name.endswith(".py"):
                            wheel.extract(name, target)
                done.touch()
    return target / package


def unpacked_vllm(version: str) -> Path:
    return unpacked("vllm", version)


def check_fork_beside_sglang(tmp_path: Path, modules: dict[str, str]):  # type: ignore[no-untyped-def]
    """A fork's package `fork` of `modules` (file name -> text) checked beside SGLang 0.5.23's real sources, whose
    classes it subclasses and calls, with both frameworks' built-in packs: the `TreeCheck`."""
    from specguard.composition import check_paths
    from specguard.packs import load_pack

    package = tmp_path / "fork"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / name).write_text(text)
    (tmp_path / "sglang").symlink_to(unpacked("sglang", "0.5.23"))
    return check_paths([package], use_cache=False, pack=load_pack(builtin=("vllm", "sglang")))


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

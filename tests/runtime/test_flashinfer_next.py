"""The FlashInfer-dependent runtime tests, run a second time on flashinfer-python 0.7.4, the newest release the guard
is assessed on besides the pinned 0.7.2.post1 (specguard/runtime/coverage.py ASSESSED).

.ci/runtime-env.sh puts 0.7.4's code in a folder of its own (`pip install --no-deps --target`, from a wheel cached
under ~/.cache/specguard/wheels), as it does vLLM 0.28.0's; this test runs the files below in a pytest of their
own with that folder first on PYTHONPATH, and fails with that run's output. Missing, it fails, never skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sg_runtime_helpers import REPO

from specguard.runtime import coverage

NEXT = "0.7.4"
# What depends on FlashInfer: the tests that import it, drive the MLA path (the stand-in kernel behind FlashInfer's
# entry), install its wrappers or name its version. Only the tests that do, where a file has others.
TESTS = [
    "tests/runtime/test_flashinfer_surface.py",
    "tests/runtime/test_flashinfer_wrappers.py",
    "tests/runtime/test_mla_forward.py",
    "tests/runtime/test_guard_differential.py",
    "tests/runtime/test_metadata_boundary.py::test_mla_builder_records_decode_query_lengths",
    "tests/runtime/test_plugin_load.py::test_enabled_installs_every_check[1]",
    "tests/runtime/test_benchmark_scripts.py::test_cpu_benchmark_measures_every_case",
]


def next_flashinfer_path() -> str:
    """Where .ci/runtime-env.sh put flashinfer-python 0.7.4's code (override with SPECGUARD_FLASHINFER_NEXT_PATH)."""
    default = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / f"flashinfer-{NEXT}"
    path = Path(os.environ.get("SPECGUARD_FLASHINFER_NEXT_PATH", default))
    assert (path / "flashinfer" / "__init__.py").is_file(), (
        f"flashinfer-python {NEXT} code not found at {path}; run .ci/runtime-env.sh first"
    )
    return str(path)


def test_the_flashinfer_dependent_runtime_tests_pass_on_the_next_flashinfer() -> None:
    assert NEXT in coverage.ASSESSED.flashinfer  # this run is what backs that entry
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (next_flashinfer_path(), env.get("PYTHONPATH")) if p)
    # which flashinfer that path makes the run import, without importing it (and torch) once more
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('flashinfer-python'), u.find_spec('flashinfer').origin)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert found.stdout.split() == [NEXT, str(Path(next_flashinfer_path()) / "flashinfer" / "__init__.py")], (
        found.stdout + found.stderr[-2000:]
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-W", "ignore", *TESTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"on flashinfer-python {NEXT}:\n{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"

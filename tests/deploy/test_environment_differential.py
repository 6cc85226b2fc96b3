"""CFG116 against vLLM's own `envs.py` (issue 30): on 0.29.0, 0.31.0 and 0.33.0, every variable the release declares
is set to one value (`false`, `1`, ``, `abc`, `-1`), vLLM's code reads each (tests/deploy/data/envs_reference.py, in
a subprocess), and `specguard config --env ...` must refuse exactly those vLLM raises on. A variable whose reading
depends on the serving machine's files (`os.path.exists(value)`) is listed as not decided, naming that test, never
passed or refused silently.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parent / "data" / "envs_reference.py"


def _envs_py(source: Path) -> Path:
    return source / "envs.py" if (source / "envs.py").is_file() else source / "vllm" / "envs.py"


def _vllm_reads(envs_py: Path, value: str) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, str(REFERENCE), str(envs_py), value],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(envs_py.parent)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("version", ["0.29.0", "0.31.0", "0.33.0"])
@pytest.mark.parametrize("value", ["false", "1", "", "abc", "-1"])
def test_cfg116_refuses_what_vllm_raises_on_and_nothing_else(
    run_config: Callable[..., tuple[int, str, str]], source_dir: Callable[[str], Path], version: str, value: str
) -> None:
    source = source_dir(version)
    reads = {name: how for name, how in _vllm_reads(_envs_py(source), value).items() if not how.startswith("skip")}
    assert len(reads) > 250  # the reference read the release's variables, not a few of them
    rc, out, err = run_config(
        "--vllm-source", str(source), "--format", "json", *(f"--env={name}={value}" for name in reads), "--", "m"
    )
    refused = {f["key"] for f in json.loads(out) if f["code"] == "CFG116"}
    undecided = dict(re.findall(r"CFG116: not decided for (\w+)=.*? depends on (.*)", err))
    decided = {name: how for name, how in reads.items() if name not in undecided}
    raised = {name for name, how in decided.items() if how.startswith("raises")}
    assert refused == raised, f"missed: {sorted(raised - refused)}; refused, vLLM reads: {sorted(refused - raised)}"
    # what is left undecided is what depends on the serving machine's files, and vLLM may raise there
    assert all("os.path" in why or "os.access" in why for why in undecided.values()), undecided
    assert all(reads[name] != "ok" for name in undecided), undecided
    assert len(undecided) <= 2, undecided

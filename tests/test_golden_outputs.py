"""What specguard says, recorded before the layering of issue 27 and asserted byte-identical after it.

Each case is one command as a user runs it (a separate process): `specguard check` on the real vLLM trees, on the
adversarial corpus and on examples/, and `specguard config` on every config example of the docs. Outputs are kept
small and stable: JSON findings sorted with paths relative to where the command ran, the source folder written as
`<vllm>`. Both run with Python's random string hashes: a message that named one of several padded sources by a
set's order differed between processes (seen on the adversarial corpus) until labels got a total order.
`python -m tests.test_golden_outputs [CASE ...]` records them again (only when a change of output is meant).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

# by its package name: tests/deploy/conftest.py holds the module name `conftest`
from tests.conftest import run_cli, unpacked_vllm

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
VERSIONS = [f"0.{minor}.0" for minor in range(22, 34)]
CONFIG_VERSIONS = ["0.28.0", "0.30.0", "0.33.0"]
KIMI_DCP = [
    "moonshotai/Kimi-K3",
    "-tp",
    "8",
    "-dcp",
    "8",
    "--cp-kv-cache-interleave-size",
    "16",
    "--block-size",
    "64",
    "--attention-backend",
    "FLASHINFER_MLA",
    "--speculative-config",
    '{"method": "dspark", "model": "moonshotai/Kimi-K3-DSpark", "num_speculative_tokens": 7, '
    '"attention_backend": "FLASHINFER_MLA"}',
]


def vllm_tree(version: str) -> Path:
    """The `vllm/` folder of a release, downloaded once as every corpus test has it: never a skipped case."""
    return unpacked_vllm(version)


def _normal(stdout: str, stderr: str, rc: int, cwd: Path, source: Path | None) -> str:
    """One stable text per run: JSON findings sorted with relative paths, text as printed, the source as `<vllm>`."""
    try:
        data = json.loads(stdout)
    except ValueError:
        body = stdout
    else:
        if isinstance(data, list):
            for item in data:
                if isinstance(item, dict) and isinstance(item.get("filename"), str):
                    name = item["filename"]
                    prefix = str(cwd) + "/"
                    item["filename"] = name[len(prefix) :] if name.startswith(prefix) else name
            data.sort(key=lambda item: json.dumps(item, sort_keys=True))
        body = json.dumps(data, indent=1, sort_keys=True) + "\n"
    text = f"exit {rc}\n--- stdout\n{body}--- stderr\n{stderr}"
    if source is not None:
        text = text.replace(str(source), "<vllm>")
    return text


def _check(cwd: Path, *args: str) -> str:
    out = run_cli("check", *args, "--format", "json", "--no-cache", cwd=cwd)
    return _normal(out.stdout, out.stderr, out.returncode, cwd, None)


def _config(version: str, *args: str) -> str:
    source = vllm_tree(version)
    out = run_cli("config", "--vllm-source", str(source), *args, cwd=REPO)
    return _normal(out.stdout, out.stderr, out.returncode, REPO, source)


def _vllm(version: str) -> str:
    root = vllm_tree(version)
    return _check(root.parent, "vllm")


def _advspec() -> str:
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch) / "project"
        shutil.copytree(REPO / "tests" / "corpus" / "advspec", project / "advspec")
        (project / "vllm").symlink_to(vllm_tree("0.28.0"))
        return _check(project, "advspec")


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], str]


def _cases() -> list[Case]:
    cases = [Case(f"check-vllm-{v}", lambda v=v: _vllm(v)) for v in VERSIONS]
    cases.append(Case("check-advspec", _advspec))
    cases.append(Case("check-examples", lambda: _check(REPO, "examples")))
    for config in sorted((REPO / "examples" / "configs").glob("*.yaml")):
        rel = str(config.relative_to(REPO))
        for version in CONFIG_VERSIONS:
            for fmt in ("json", "text"):
                name = f"config-{config.stem}-{version}-{fmt}"
                cases.append(Case(name, lambda v=version, r=rel, f=fmt: _config(v, r, "--format", f)))
    dflash = "examples/configs/dflash-dp2.yaml"
    v1_runner = ("--env", "VLLM_USE_V2_MODEL_RUNNER=0")
    cases.append(Case("config-dflash-v1-runner", lambda: _config("0.28.0", dflash, *v1_runner)))
    cases.append(Case("config-kimi-args", lambda: _config("0.33.0", "--format", "json", "--", *KIMI_DCP)))
    strict_pcp = ("--strict", "-v", "--", "m", "-pcp", "2", "-dp", "2")
    cases.append(Case("config-strict-pcp", lambda: _config("0.33.0", *strict_pcp)))
    return cases


CASES = {case.name: case for case in _cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_what_was_recorded(name: str) -> None:
    recorded = GOLDEN / f"{name}.txt"
    assert recorded.exists(), f"{recorded.name} is not recorded: python -m tests.test_golden_outputs {name}"
    assert CASES[name].run() == recorded.read_text()


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name in sys.argv[1:] or sorted(CASES):
        (GOLDEN / f"{name}.txt").write_text(CASES[name].run())
        print(f"{name}: recorded")

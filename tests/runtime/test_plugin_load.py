"""The plugin as vLLM loads it: `vllm.plugins.load_general_plugins()` in a fresh interpreter, which finds
specguard through its `vllm.general_plugins` entry point (specguard must be pip-installed in the venv)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess

import pytest
from sg_runtime_helpers import REPO, run_in_venv, venv_python

SCRIPT = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO)  # as `vllm serve` configures logging before it loads plugins
import vllm.plugins  # vLLM itself imports torch here
before = set(sys.modules)
vllm.plugins.load_general_plugins()
loaded_by_plugins = sorted(set(sys.modules) - before)
import specguard.runtime as sg
sg.register()  # vLLM may call it again in the same process: idempotent
report = {
    "loaded_by_plugins": loaded_by_plugins,
    "installed": sg.installed_checks()[0],
    "skipped": sg.installed_checks()[1],
}
from specguard.runtime.patching import is_wrapped
from vllm.v1.attention.backends.mla import flashinfer_mla as fm
from vllm.v1.kv_cache_interface import MLAAttentionSpec
from vllm.v1.worker.gpu.spec_decode import speculator as sp
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper as P
from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper as D
targets = {
    "forward_mqa": fm.FlashInferMLAImpl.__dict__["forward_mqa"],
    "mla_kernel": fm.trtllm_batch_decode_with_kv_cache_mla,
    "merge": MLAAttentionSpec.__dict__["merge"],
    "helper": sp.DraftModelSpeculator.__dict__["_build_attn_metadata"],
    "build_attn_metadata": sp.build_attn_metadata,
    "prefill_run": P.__dict__["run"], "prefill_plan": P.__dict__["plan"], "decode_run": D.__dict__["run"],
}
report["wrapped"] = {k: is_wrapped(v) for k, v in targets.items()}
print("REPORT " + json.dumps(report))
"""


def _load(env_value: str | None) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SPECGUARD"}
    if env_value is not None:
        env["VLLM_SPECGUARD"] = env_value
    proc = run_in_venv(["-c", SCRIPT], env)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :]), proc.stdout + proc.stderr


@pytest.mark.parametrize("value", ["1", "warn"])
def test_enabled_installs_every_check(value) -> None:
    report, output = _load(value)
    assert all(report["wrapped"].values()), report["wrapped"]
    assert report["skipped"] == [], report["skipped"]
    installed = " ".join(report["installed"])
    for check in (
        "G0@AttentionMetadataBuilder.build/build_for_drafting/build_for_cudagraph_capture",
        "G1@BatchPrefillWithPagedKVCacheWrapper.plan/run",
        "G1@BatchPrefillWithRaggedKVCacheWrapper.plan/run",
        "G1@BatchDecodeWithPagedKVCacheWrapper",
        "G1@fast_decode_plan",
        "G1+G3@FlashInferMLAImpl.forward_mqa",
        "G2@flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla",
        "G3@MLAAttentionSpec.merge",
        "G4@DraftModelSpeculator._build_attn_metadata->build_attn_metadata",
    ):
        assert check in installed
    assert "FullAttentionSpec.merge" not in installed  # its non_causal is no G3 flag
    # one log line naming versions, installed and skipped checks
    lines = [x for x in output.splitlines() if "specguard runtime guard (VLLM_SPECGUARD mode=" in x]
    assert len(lines) == 1, output[-3000:]
    # the flashinfer-python this run has (0.7.2.post1 in the venv; 0.7.4 under test_flashinfer_next.py)
    flashinfer = importlib.metadata.version("flashinfer-python")
    assert f"for vLLM 0.33.0, flashinfer-python {flashinfer}: installed [" in lines[0]
    assert "skipped [none]" in lines[0]


LIGHT_MODULES = ["specguard", "specguard.runtime", "specguard.runtime.errors", "specguard.runtime.policy"]


@pytest.mark.parametrize("value", [None, "off"])
def test_disabled_patches_nothing(value) -> None:
    report, _ = _load(value)
    assert not any(report["wrapped"].values()), report["wrapped"]
    assert report["installed"] == [] and report["skipped"] == []
    # loading the plugins brought in specguard's light modules only: no torch, FlashInfer or vLLM backend,
    # kv-cache or worker module (vLLM's own general plugins, the LoRA resolvers, load what they load);
    # a variable set to off is still made known to vLLM's registry (specguard.runtime.vllm_env)
    loaded = report["loaded_by_plugins"]
    light = LIGHT_MODULES + (["specguard.runtime.vllm_env"] if value is not None else [])
    assert [m for m in loaded if m.startswith("specguard")] == light, loaded
    assert [m for m in loaded if m.split(".")[0] in ("torch", "flashinfer")] == [], loaded
    assert [m for m in loaded if m.startswith("vllm.v1")] == [], loaded


@pytest.mark.parametrize("value", [None, "", "0", "off"])
def test_disabled_register_imports_neither_torch_nor_vllm(value) -> None:
    script = (
        "import sys, specguard.runtime as sg; sg.register(); "
        "print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'vllm', 'flashinfer', 'specguard')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SPECGUARD"}
    if value is not None:
        env["VLLM_SPECGUARD"] = value
    proc = subprocess.run([venv_python(), "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(LIGHT_MODULES)


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"VLLM_SPECGUARD": "yes"},
            "VLLM_SPECGUARD='yes' is not a valid value; use one of: unset, '0', 'off', '1', 'raise', 'warn'",
        ),
        (
            {"VLLM_SPECGUARD": "1", "VLLM_SPECGUARD_STATS_INTERVAL": "soon"},
            "VLLM_SPECGUARD_STATS_INTERVAL='soon' is not a valid value; use a number of seconds from 1 on",
        ),
    ],
)
def test_invalid_value_is_a_startup_error(env, message) -> None:
    proc = subprocess.run(
        [venv_python(), "-W", "ignore", "-c", "import vllm.plugins; vllm.plugins.load_general_plugins()"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode != 0
    assert message in proc.stderr

"""Fixes on the real vLLM trees (the wheels' sources, copied: the cached ones are never written)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specguard.analysis.engine import check_paths

DFLASH = "v1/worker/gpu/spec_decode/dflash/speculator.py"


def test_dflash_override_in_0_28_0_keeps_its_finding_and_says_why_no_fix(vllm_source) -> None:  # type: ignore[no-untyped-def]
    """It returns early when there are no draft layers and passes `self.num_query_per_req` instead of its own
    parameter: deleting it would change what runs, so the upstream fix needed a person."""
    result = check_paths([vllm_source("0.28.0") / DFLASH], use_cache=False)
    (finding,) = [f for f in result.findings if f.code == "SG102"]
    assert finding.fix is None
    assert finding.message.endswith(
        "; no fix offered: the override is not a pure forward (it also runs an `if` that returns early and "
        "asserts; it passes `self.num_query_per_req` for `num_query_per_req`)"
    )


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_the_fixed_sg201_merge_runs_on_real_specs(version, vllm_source, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """vLLM's own kv_cache_interface.py, fixed by `--fix` and executed (its imports resolve to the installed
    vLLM): specs that agree merge to their value, a causal and a non-causal spec raise ValueError naming both
    the class and the flag."""
    import torch

    target = tmp_path / "vllm" / "v1" / "kv_cache_interface.py"
    target.parent.mkdir(parents=True)
    shutil.copy(vllm_source(version) / "v1" / "kv_cache_interface.py", target)
    out = cli("check", "vllm", "--fix", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout.strip()) == (0, "Found 1 finding (1 fixed, 0 remaining)."), out.stderr
    fixed = _load(target, f"specguard_fixed_kv_cache_interface_{version.replace('.', '_')}")

    def spec(non_causal: bool):  # type: ignore[no-untyped-def]
        return fixed.MLAAttentionSpec(
            block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, non_causal_multi_token_decode=non_causal
        )

    assert fixed.MLAAttentionSpec.merge([spec(True), spec(True)]).non_causal_multi_token_decode is True
    assert fixed.MLAAttentionSpec.merge([spec(False)] * 3).non_causal_multi_token_decode is False
    with pytest.raises(
        ValueError, match=r"^MLAAttentionSpec: .* disagree on non_causal_multi_token_decode: \[False, True\]"
    ):
        fixed.MLAAttentionSpec.merge([spec(False), spec(False), spec(True)])


def test_the_readme_diffs_are_what_diff_prints_on_0_28_0(vllm_source, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    shown = [b.split("```", 1)[0] for b in readme.split("```diff\n")[1:]]
    assert shown
    shutil.copytree(vllm_source("0.28.0"), tmp_path / "vllm")
    out = cli("check", "vllm", "--diff", "--unsafe-fixes", "--no-cache", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    for block in shown:
        assert block in out.stdout

"""The speculative method is judged as the served source derives it (issue 30, and blind config set 1): vLLM's
`SpeculativeConfig.__post_init__` infers it from the draft model's name when the config leaves it out, and
re-infers one it does not keep as written (vLLM 0.29.0 keeps only eagle, eagle3, dflash and dspark). Each case
of the seed bug below was "no hazards found" before; where the method depends on what vLLM reads from the draft
model at startup, the hazards that need it are not judged, and say why. And CFG101 is judged from the padded
count reaching the draft build (SG103), not from an override of the shared helper alone (SG102)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.deploy.sg_mutate import fork, replace, rewrite

DRAFT = "z-lab/Qwen3-8B-DFlash-b16"
INFERRED = {
    "the method left out": ["-sc", json.dumps({"model": DRAFT, "num_speculative_tokens": 8})],
    "dotted spellings": ["--speculative-config.model", DRAFT, "--speculative-config.num_speculative_tokens", "8"],
    "a method vLLM re-infers": [
        "-sc",
        json.dumps({"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 8}),
    ],
}


@pytest.mark.parametrize("spec", INFERRED.values(), ids=list(INFERRED))
def test_the_seed_bug_with_an_inferred_dflash_method_is_cfg101(run_config, source_dir, spec: list[str]) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.29.0")), "--", "Qwen/Qwen3-8B", "-dp", "2", *spec)
    assert rc == 1, out
    assert "data-parallel-size=2: CFG101 error" in out and "speculative method 'dflash'" in out
    assert "speculative-config.method is 'dflash' as vLLM 0.29.0" in out and "(config/speculative.py:1292)" in out
    # the same config without DP: the method is still inferred, and nothing is wrong
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.29.0")), "--", "Qwen/Qwen3-8B", *spec)
    assert rc == 0, out


def test_a_method_that_depends_on_the_draft_models_config_is_not_judged(run_config, source_dir) -> None:  # type: ignore[no-untyped-def]
    spec = json.dumps({"model": "deepseek-ai/dspark_qwen3_8b_block7", "num_speculative_tokens": 7})
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.29.0")), "--strict", "--", "m", "-dp", "2", "-sc", spec)
    assert rc == 3, out
    assert "CFG101" in out and "depends on what vLLM reads from the draft model" in out


def test_a_written_method_vllm_may_re_derive_is_judged_as_written_and_said(run_config, source_dir) -> None:  # type: ignore[no-untyped-def]
    spec = json.dumps({"method": "dflash", "model": "org/some-draft", "num_speculative_tokens": 8})
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.29.0")), "--", "m", "-dp", "2", "-sc", spec)
    assert rc == 1 and "CFG101 error" in out, out


def test_an_override_that_takes_the_real_count_is_not_cfg101(run_config, source_dir, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A fork of 0.29.0 that keeps DFlash's override of the shared helper (SG102) but hands it the real count
    outside FULL graphs: the count is the hazard, and it is gone."""
    tree = fork(source_dir("0.29.0"), tmp_path)
    fixed = (
        "            num_tokens_padded=(\n"
        "                num_tokens_padded if batch_desc.cg_mode == CUDAGraphMode.FULL else num_query_tokens\n"
        "            ),\n"
        "            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,\n"
    )
    old = "            num_tokens_padded=num_tokens_padded,\n"
    fixed = fixed.removesuffix("            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,\n")
    rewrite(tree, "v1/worker/gpu/spec_decode/dflash/speculator.py", replace(old, fixed))
    spec = json.dumps({"method": "dflash", "model": DRAFT, "num_speculative_tokens": 8})
    rc, out, _ = run_config("--vllm-source", str(tree), "--", "m", "-dp", "2", "-sc", spec)
    assert rc == 0, out
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.29.0")), "--", "m", "-dp", "2", "-sc", spec)
    assert rc == 1 and "SG103 at" in out, out


def test_a_method_vllm_derives_from_the_target_is_judged_for_each_it_may_be(run_config, source_dir) -> None:  # type: ignore[no-untyped-def]
    """Blind config set 5's silent hazard: 0.27.0 replaces `deepseek_mtp` by `mtp` on every path, then re-infers
    the method from the target's config. Judged as written (`deepseek_mtp`, which no registry builds) it was
    clean; each method it may arrive at is judged: the hazard of `mtp`, what every path sets first, is reported,
    and one only another method has is not judged, saying which."""
    spec = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 2})
    argv = ["--vllm-source", str(source_dir("0.27.0")), "--strict", "--env", "VLLM_USE_V2_MODEL_RUNNER=1", "--"]
    rc, out, _ = run_config(*argv, "deepseek-ai/DeepSeek-R1", "-dp", "8", "-sc", spec)
    assert rc == 1, out
    assert "data-parallel-size=8: CFG117 warning" in out and "speculative method 'mtp' runs" in out
    assert "speculative-config.method is one of 'mtp', " in out and "a hazard of 'mtp' reported" in out
    assert "CFG101 not judged: it depends on the speculative method vLLM derives at startup ('mtp' has not;" in out
    # without DP no method has a DP hazard: the verdicts they share stand
    rc, out, _ = run_config(*argv, "deepseek-ai/DeepSeek-R1", "-sc", spec)
    assert "CFG117" not in out and "CFG101" not in out, out

"""Acceptance on the real vLLM trees: every finding is listed here with the reason it is right.

vLLM 0.22.0 through 0.33.0: 0.28.0 has the code before both upstream fixes, 0.29.0 after the DCP fix, 0.30.0
and later after the DP fix too (and 0.30.0 went back to `any()` in the merge). The wheels' Python sources are
downloaded once and cached (tests/conftest.py). The trees are checked as `specguard check vllm` from the
folder holding the package, as a user would.
"""

from __future__ import annotations

import json

import pytest

SPEC = "vllm/v1/worker/gpu/spec_decode"
VERSIONS = [f"0.{minor}.0" for minor in range(22, 34)]

# What each finding is, and why it is right. Every (file, code, scope) below is reported on exactly the releases
# listed with it, once each, and nothing else is reported on 0.22.0 through 0.33.0.
_DFLASH_OVERRIDE = (
    "the DFlash override the DP fix deleted; it forwarded the caller's DP-padded count to the base helper"
)
_DFLASH_PROPOSE = (
    "num_tokens_padded = batch_desc.num_tokens (from dispatch_cg_and_sync_dp) reaches the helper with no FULL "
    "check: in eager or PIECEWISE mode the count carries DP padding query_start_loc does not; the DFlash DP>1 "
    "startup crash of the first seed"
)
_MULTI_STEP = (
    "batch_desc (a BatchExecutionDescriptor parameter) .num_tokens passed as num_tokens_padded= for every mode; "
    "the `cg_mode == FULL` test after it only chooses between replaying the graph and running eagerly"
)
_FUSED = "same, in the fused path; its `cg_mode != FULL` test guards only the slot mappings, not the helper call"
_MTP = "batch_desc from dispatch_cg_and_sync_dp, .num_tokens passed straight to the helper for every mode"
_STALE_DCP = (
    "the base helper calls build_attn_metadata (which accepts dcp_local_seq_lens) without recomputing them and "
    "without a caller's: the draft attends with the target's stale DCP-local lengths (the second seed); 0.29.0 "
    "added the recompute"
)
_ANY_MERGE = (
    "non_causal_multi_token_decode=any(...): a group whose layers disagree still merges, carrying its most "
    "permissive layer's flag, and 0.27.0/0.28.0's MLA metadata builder reads that merged flag for every layer"
)
_ANY_MERGE_AGAIN = (
    "the merge went back to non_causal_multi_token_decode=any(...) after 0.29.0's DCP fix had made it assert one "
    "value; the MLA builder now recomputes the flag per layer, every other consumer of the union must too (or the "
    "group must not mix); the runtime guard's G3 is how a deployment verifies its groups"
)

_FINDINGS: list[tuple[tuple[str, str, str], str, list[str]]] = [
    # found since a function handed its batch's descriptor is judged wherever its class names the sink (issue 28):
    # 0.22.0's EAGLE speculator, before the code moved to the autoregressive one
    ((f"{SPEC}/eagle/speculator.py", "SG103", "EagleSpeculator.multi_step_decode"), _MULTI_STEP, ["0.22.0"]),
    (
        (f"{SPEC}/autoregressive/speculator.py", "SG103", "AutoRegressiveSpeculator._multi_step_decode"),
        _MULTI_STEP,
        VERSIONS[1:8],
    ),
    (
        (f"{SPEC}/autoregressive/speculator.py", "SG103", "AutoRegressiveSpeculator._fused_multi_step_decode"),
        _FUSED,
        ["0.28.0", "0.29.0"],
    ),
    (
        (f"{SPEC}/dflash/speculator.py", "SG102", "DFlashSpeculator._build_draft_attn_metadata"),
        _DFLASH_OVERRIDE,
        VERSIONS[2:8],
    ),
    ((f"{SPEC}/dflash/speculator.py", "SG103", "DFlashSpeculator.propose"), _DFLASH_PROPOSE, VERSIONS[2:8]),
    ((f"{SPEC}/multi_module_mtp/speculator.py", "SG103", "MultiModuleMTPSpeculator.propose"), _MTP, VERSIONS[5:8]),
    ((f"{SPEC}/speculator.py", "SG105", "DraftModelSpeculator._build_draft_attn_metadata"), _STALE_DCP, VERSIONS[1:7]),
    (("vllm/v1/kv_cache_interface.py", "SG201", "MLAAttentionSpec.merge"), _ANY_MERGE, ["0.27.0", "0.28.0"]),
    (("vllm/v1/kv_cache_interface.py", "SG201", "MLAAttentionSpec.merge"), _ANY_MERGE_AGAIN, VERSIONS[8:]),
]


def expected(version: str) -> dict[tuple[str, str, str], str]:
    """(file, code, scope) -> why the finding is right, for one release."""
    return {key: why for key, why, versions in _FINDINGS if version in versions}


EXPECTED_0_28_0 = expected("0.28.0")
EXPECTED_0_33_0 = expected("0.33.0")


def _check(cli, root) -> list[dict]:  # type: ignore[no-untyped-def]
    out = cli("check", "vllm", "--format", "json", "--no-cache", cwd=root.parent)
    assert out.returncode in (0, 1), out.stderr
    assert out.stderr == ""  # no SG000, no internal error, no missing-path error
    return json.loads(out.stdout)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_finding_on_the_real_tree_is_expected(version, vllm_source, cli) -> None:  # type: ignore[no-untyped-def]
    root = vllm_source(version)
    findings = _check(cli, root)
    got = {}
    for f in findings:
        rel = f["filename"][len(str(root.parent)) + 1 :]
        got[(rel, f["code"])] = got.get((rel, f["code"]), 0) + 1
    assert all(f["code"] != "SG000" for f in findings)
    wanted = expected(version)
    keyed = {(k[0], k[1]) for k in wanted}
    assert set(got) == keyed, f"unexplained or missing findings: {set(got) ^ keyed}"
    # one finding per expected (file, code, scope): four SG103 in 0.28.0, one per call site
    assert sum(got.values()) == len(wanted)


@pytest.mark.parametrize("version", VERSIONS)
def test_findings_name_the_scope_they_are_in(version, vllm_source) -> None:  # type: ignore[no-untyped-def]
    from specguard.composition import check_paths

    root = vllm_source(version)
    result = check_paths([root], use_cache=False)
    got = {(f.path[len(str(root.parent)) + 1 :], f.code, f.symbol) for f in result.findings}
    assert got == set(expected(version))
    assert result.errors == []
    # docs/check.md says it: no site is listed as not decided on any of these releases (issue 28 allows five)
    assert [(path, j.code, j.scope) for path, j in result.undecided] == []


def test_0_33_0_has_no_speculator_or_geometry_finding(vllm_source) -> None:  # type: ignore[no-untyped-def]
    """The fixed tree: its DFlash capture builder (dflash/cudagraph.py, for_cudagraph_capture=True, not a
    speculator module) and the model states that build target metadata are not speculator paths."""
    from specguard.composition import check_paths

    result = check_paths([vllm_source("0.33.0")], use_cache=False)
    assert [f for f in result.findings if f.code.startswith("SG1") or f.code == "SG202"] == []


def test_sg103_points_at_the_argument(vllm_source) -> None:  # type: ignore[no-untyped-def]
    from specguard.composition import check_paths

    root = vllm_source("0.28.0")
    result = check_paths([root / "v1/worker/gpu/spec_decode/dflash/speculator.py"], use_cache=False)
    (finding,) = [f for f in result.findings if f.code == "SG103"]
    line = (root / "v1/worker/gpu/spec_decode/dflash/speculator.py").read_text().splitlines()[finding.line - 1]
    assert line.strip() == "num_tokens_padded=num_tokens_padded,"


def test_a_subtree_still_resolves_bases_outside_it(vllm_source) -> None:  # type: ignore[no-untyped-def]
    """Checking only dflash/ must still know DFlashSpeculator is a speculator (its base is in ../speculator.py)."""
    from specguard.composition import check_paths

    root = vllm_source("0.28.0")
    result = check_paths([root / "v1/worker/gpu/spec_decode/dflash"], use_cache=False)
    assert sorted(f.code for f in result.findings) == ["SG102", "SG103"]

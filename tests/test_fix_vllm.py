"""Fixes on the real vLLM trees (the wheels' sources, copied: the cached ones are never written)."""

from __future__ import annotations

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

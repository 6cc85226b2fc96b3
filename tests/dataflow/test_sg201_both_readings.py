"""Issue #12 item 17: SG201's message and docs hold under both readings of the upstream `any()` merge.

vLLM 0.30.0+ documents the merged `non_causal_multi_token_decode` as a group capability ("Runtime metadata still
selects causal vs. non-causal mode") and its MLA builder recomputes the flag from its own layers; the DCP fix had
required agreement instead. The finding stays, but it must say what the union does and what consumers must do,
not that the group "becomes non-causal", and point at the runtime guard's G3."""

from __future__ import annotations

import json

import pytest
from merge_specs import check_merge

from specguard.rules import load_rule

OVERCLAIMS = ("becomes non-causal", "makes the whole group non-causal", "turns the whole group")


def _assert_true_under_both_readings(text: str) -> None:
    text = " ".join(text.split())
    assert "most permissive layer's flag" in text  # what the union does
    assert "recompute it per layer" in text or "recomputes it per layer" in text  # what consumers must do...
    assert "require the specs to agree" in text or "never mixes" in text  # ...or the group must not mix
    assert "G3" in text and "VLLM_SPECGUARD=1" in text  # the deployment check
    assert not any(claim in text for claim in OVERCLAIMS)


def test_the_finding_on_vllm_0_33_0_is_true_under_both_readings(vllm_source, cli) -> None:  # type: ignore[no-untyped-def]
    root = vllm_source("0.33.0")
    upstream = (root / "v1/kv_cache_interface.py").read_text()
    assert "Runtime metadata still selects causal vs. non-causal mode" in upstream
    out = cli("check", "vllm/v1/kv_cache_interface.py", "--format", "json", "--no-cache", cwd=root.parent)
    (finding,) = json.loads(out.stdout)
    assert finding["code"] == "SG201"
    _assert_true_under_both_readings(finding["message"])


@pytest.mark.parametrize("merge", ["any", "all"])
def test_explain_and_the_message_for_any_and_all(merge: str, cli) -> None:  # type: ignore[no-untyped-def]

    findings, _ = check_merge(
        f"""
        @classmethod
        def merge(cls, specs):
            flags = [s.non_causal_multi_token_decode for s in specs]
            return cls(block_size=1, non_causal_multi_token_decode={merge}(flags))
        """
    )
    (finding,) = findings
    message = " ".join(finding.message.split())
    if merge == "any":
        _assert_true_under_both_readings(message)
    else:  # an intersection: the least permissive layer's flag
        assert "least permissive layer's flag" in message and "G3" in message
    docs = cli("explain", "SG201").stdout
    _assert_true_under_both_readings(docs)
    assert "Runtime metadata still selects causal vs. non-causal mode" in " ".join(docs.split())
    assert load_rule("SG201").docs() in docs

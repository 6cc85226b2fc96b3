"""G3 at KV-cache group merge, on vLLM 0.33.0's real MLAAttentionSpec (which merges the flag with any())."""

from __future__ import annotations

import pytest
import torch
from vllm.v1.kv_cache_interface import MLAAttentionSpec

from specguard.runtime import SpecGuardViolation, stats


def _spec(non_causal: bool) -> MLAAttentionSpec:
    return MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=576,
        dtype=torch.bfloat16,
        non_causal_multi_token_decode=non_causal,
    )


def test_consistent_groups_merge(guard) -> None:
    guard("raise")
    assert MLAAttentionSpec.merge([_spec(False)] * 3).non_causal_multi_token_decode is False
    assert MLAAttentionSpec.merge([_spec(True)] * 2).non_causal_multi_token_decode is True
    assert stats()["violations"] == {}
    assert stats()["checks_run"] == {"G3:MLAAttentionSpec.merge": 2}


def test_causal_target_and_noncausal_draft_in_one_group(guard) -> None:
    guard("raise")
    with pytest.raises(SpecGuardViolation) as err:
        MLAAttentionSpec.merge([_spec(False), _spec(False), _spec(True)])
    msg = str(err.value)
    assert "[specguard G3 group causal consistency] MLAAttentionSpec.merge" in msg
    assert "disagrees on non_causal_multi_token_decode" in msg
    assert "non_causal_multi_token_decode=False=2, non_causal_multi_token_decode=True=1" in msg
    assert "SG201 group-flag-any-merge" in msg


def test_warn_mode_lets_vllm_merge(guard) -> None:
    guard("warn")
    merged = MLAAttentionSpec.merge([_spec(False), _spec(True)])
    assert merged.non_causal_multi_token_decode is True  # vLLM's any(): the behaviour the check exists for
    assert stats()["violations"] == {"G3:MLAAttentionSpec.merge": 1}

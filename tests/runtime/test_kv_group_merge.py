"""G3 at KV-cache group merge, on vLLM 0.33.0's real spec classes: a group that mixes the non-causal decode
flag is recorded (counted, logged once), never raised, so vLLM's grouping decisions stay its own."""

from __future__ import annotations

import logging

import pytest
import torch
from vllm.v1.core import kv_cache_planning
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

from specguard.runtime import stats


def _mla(non_causal: bool) -> MLAAttentionSpec:
    return MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=576,
        dtype=torch.bfloat16,
        non_causal_multi_token_decode=non_causal,
    )


def _full(non_causal: bool) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64, dtype=torch.bfloat16, non_causal=non_causal)


def test_consistent_groups_merge(guard) -> None:
    guard("raise")
    assert MLAAttentionSpec.merge([_mla(False)] * 3).non_causal_multi_token_decode is False
    assert MLAAttentionSpec.merge([_mla(True)] * 2).non_causal_multi_token_decode is True
    assert stats()["violations"] == {} and stats()["recorded"] == {}
    assert stats()["checks_run"] == {"G3:MLAAttentionSpec.merge": 2}


@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_a_mixed_group_is_recorded_never_raised(guard, mode, caplog) -> None:
    guard(mode)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            merged = MLAAttentionSpec.merge([_mla(False), _mla(False), _mla(True)])
            assert merged.non_causal_multi_token_decode is True  # vLLM's any(), untouched
    s = stats()
    assert s["violations"] == {} and s["recorded"] == {"G3:MLAAttentionSpec.merge": 2}
    logged = [r.getMessage() for r in caplog.records if "[specguard G3" in r.getMessage()]
    assert len(logged) == 1
    msg = logged[0]
    assert "[specguard G3 group causal consistency] MLAAttentionSpec.merge" in msg
    assert "mixes values of non_causal_multi_token_decode" in msg
    assert "carries its most permissive layer's value" in msg
    assert "non_causal_multi_token_decode=False=2, non_causal_multi_token_decode=True=1" in msg
    assert "recorded, not raised" in msg and "SG201 group-flag-any-merge" in msg


def test_full_attention_non_causal_is_not_a_g3_flag(guard) -> None:
    """vLLM merges FullAttentionSpec.non_causal (Prefix-LM scheduling) with any() on purpose."""
    guard("raise")
    assert FullAttentionSpec.merge([_full(False), _full(True)]).non_causal is True
    s = stats()
    assert s["recorded"] == {} and s["violations"] == {}
    assert not any(key.startswith("G3:FullAttentionSpec") for key in s["checks_run"])


def _planning_decisions() -> tuple:
    """What vLLM decides from trial merges: uniformity, and the KV-cache groups of a target+draft model."""
    uniform_full = kv_cache_planning.is_kv_cache_spec_uniform({"a": _full(False), "b": _full(True)})
    uniform_mla = kv_cache_planning.is_kv_cache_spec_uniform({"t": _mla(False), "d": _mla(True)})
    incompatible = kv_cache_planning.is_kv_cache_spec_uniform({"t": _mla(False), "f": _full(False)})
    groups = kv_cache_planning._get_kv_cache_groups_uniform_page_size(
        {"t.0": _mla(False), "t.1": _mla(False), "d.0": _mla(True)}
    )
    return uniform_full, uniform_mla, incompatible, [(g.layer_names, g.kv_cache_spec) for g in groups]


def test_vllm_grouping_decisions_are_the_same_with_the_guard_off_warn_and_raise(guard) -> None:
    """Issue 12 item 1: with the guard raising an AssertionError at merge, `is_kv_cache_spec_uniform`
    answered False for two FullAttentionSpec that differ only in non_causal: the guard changed the layout."""
    off = _planning_decisions()
    assert off[0] is True and off[1] is True and off[2] is False
    for mode in ("warn", "raise"):
        guard(mode)
        assert _planning_decisions() == off, mode
        from specguard.runtime import install

        install.uninstall()

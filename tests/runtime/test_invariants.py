"""The pure checks, without vLLM: each passes on consistent inputs and names the numbers when not."""

from __future__ import annotations

import pytest

from specguard.runtime import invariants as inv
from specguard.runtime.errors import SpecGuardViolation

SITE = "site"


def test_prefill_rows_match_and_mismatch() -> None:
    assert inv.check_prefill_rows(48, 48, site=SITE, subject="w") is None
    v = inv.check_prefill_rows(52, 48, site=SITE, subject="w", planned_reqs=12)
    assert v is not None and v.check == "G1"
    assert "q.shape[0] (52) does not match qo_indptr[-1] (48)" in v.message
    assert v.facts["difference"] == 4
    assert "SG103 padded-token-count" in v.message and "SG101 metadata-outside-helper" in v.message


def test_decode_rows_exact_and_flexible() -> None:
    assert inv.check_decode_rows(12, 6, 2, exact=True, site=SITE, subject="w") is None
    assert inv.check_decode_rows(10, 6, 2, exact=True, site=SITE, subject="w") is not None
    # trtllm-gen / cute-dsl may tile another per-request length: a whole multiple of the batch is fine
    assert inv.check_decode_rows(18, 6, 2, exact=False, site=SITE, subject="w") is None
    v = inv.check_decode_rows(13, 6, 2, exact=False, site=SITE, subject="w")
    assert v is not None and "multiple of the 6 planned requests" in v.message


def test_mla_query_rows() -> None:
    assert inv.check_mla_query_rows(8, 8, 2, site=SITE, subject="layer L") is None
    v = inv.check_mla_query_rows(9, 8, 2, site=SITE, subject="layer L")
    assert v is not None
    assert "query rows (9) do not match attn_metadata.num_decode_tokens (8)" in v.message
    assert "layer L" in v.message


def _geometry(**over):
    args = dict(
        query_shape=(4, 1, 16, 576),
        block_tables_shape=(4, 8),
        seq_lens_shape=(4,),
        cum_seq_lens_q_shape=None,
        global_bound_shape=None,
        dtypes={"block_tables": "int32", "seq_lens": "int32"},
        enable_dcp=False,
        cp_world=1,
        cp_rank=0,
        site=SITE,
        subject="layer L",
    )
    args.update(over)
    return inv.check_mla_decode_geometry(**args)


def test_geometry_consistent_variants_pass() -> None:
    assert _geometry() is None
    # compact ragged query: rows are tokens, requests come from cum_seq_lens_q
    assert _geometry(query_shape=(11, 16, 576), cum_seq_lens_q_shape=(5,)) is None
    assert (
        _geometry(
            enable_dcp=True,
            cp_world=2,
            cp_rank=1,
            global_bound_shape=(4,),
            dtypes={"causal_seqlens_kv_global": "int32"},
        )
        is None
    )


def test_geometry_unexpanded_global_bound_names_the_cause() -> None:
    # non-causal flattening: 3 requests x 4 query tokens became 12 rows; the global bound stayed at 3
    v = _geometry(
        query_shape=(12, 1, 16, 576),
        block_tables_shape=(12, 8),
        seq_lens_shape=(12,),
        global_bound_shape=(3,),
        enable_dcp=True,
        cp_world=2,
        cp_rank=0,
    )
    assert v is not None and v.check == "G2"
    assert "causal_seqlens_kv_global=3" in v.message and "block_tables=12" in v.message
    assert "left the DCP global causal bound" in v.cause
    assert v.rules == ("SG202",)


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"block_tables_shape": (3, 8)}, "batch rows disagree"),
        ({"query_shape": (11, 16, 576), "cum_seq_lens_q_shape": (4,)}, "cum_seq_lens_q has 4 entries for 4"),
        ({"enable_dcp": True, "cp_world": 2}, "without causal_seqlens_kv_global"),
        ({"enable_dcp": True, "cp_world": 2, "cp_rank": 2, "global_bound_shape": (4,)}, "cp_rank=2 outside"),
        ({"dtypes": {"seq_lens": "int64"}}, "seq_lens has dtype int64, the kernel takes int32"),
    ],
)
def test_geometry_faults(over, needle) -> None:
    v = _geometry(**over)
    assert v is not None and needle in v.message


def test_noncausal_layer_and_dcp() -> None:
    ok = dict(causal=False, multi_token=True, num_decode_tokens=8, num_decodes=2, site=SITE, subject="L")
    assert inv.check_noncausal_layer(layer_non_causal=True, **ok) is None
    v = inv.check_noncausal_layer(layer_non_causal=False, **ok)
    assert v is not None and v.check == "G3" and "SG201" in v.message
    assert inv.check_noncausal_layer(**{**ok, "causal": True}, layer_non_causal=False) is None
    dcp = dict(causal=False, multi_token=True, dcp_world_size=2, backend="B", site=SITE, subject="L")
    assert inv.check_noncausal_dcp(backend_supports=True, **dcp) is None
    v = inv.check_noncausal_dcp(backend_supports=False, **dcp)
    assert v is not None and "supports_non_causal_multi_token_dcp" in v.message


def test_group_flags() -> None:
    assert inv.check_group_flags({"non_causal_multi_token_decode": [False, False]}, site=SITE, subject="g") is None
    v = inv.check_group_flags({"non_causal_multi_token_decode": [False, False, True]}, site=SITE, subject="g")
    assert v is not None
    assert v.facts == {"non_causal_multi_token_decode=False": 2, "non_causal_multi_token_decode=True": 1}
    assert "SG201 group-flag-any-merge" in v.message


def test_draft_token_count() -> None:
    common = dict(
        speculator="DFlashSpeculator",
        num_reqs=12,
        descriptor_tokens=52,
        dispatched_tokens=48,
        dp_size=2,
        site=SITE,
    )
    assert inv.check_draft_token_count(handed_tokens=52, real_tokens=48, cg_mode="FULL", **common) is None
    assert inv.check_draft_token_count(handed_tokens=48, real_tokens=48, cg_mode="PIECEWISE", **common) is None
    v = inv.check_draft_token_count(handed_tokens=52, real_tokens=48, cg_mode="PIECEWISE", **common)
    assert v is not None and v.check == "G4"
    assert "(52) != real query tokens query_start_loc[-1] (48)" in v.message
    assert "DFlashSpeculator, cudagraph mode PIECEWISE" in v.message
    assert "dp_size=2" in v.message and v.facts["padding"] == 4


def test_violation_is_an_assertion_error() -> None:
    v = inv.check_prefill_rows(2, 1, site=SITE, subject="w")
    assert v is not None
    err = SpecGuardViolation(v)
    assert isinstance(err, AssertionError) and err.violation is v and str(err) == v.message

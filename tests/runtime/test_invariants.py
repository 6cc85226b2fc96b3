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


def test_violation_is_neither_an_assertion_nor_a_value_error() -> None:
    """vLLM reads AssertionError/ValueError from a spec merge as "cannot merge": the guard's exception must
    not be one (issue 12, reversing the first runtime issue's AssertionError)."""
    v = inv.check_prefill_rows(2, 1, site=SITE, subject="w")
    assert v is not None
    err = SpecGuardViolation(v)
    assert not isinstance(err, (AssertionError, ValueError))
    assert isinstance(err, Exception) and err.violation is v and str(err) == v.message


def test_likely_cause_only_when_the_numbers_show_it() -> None:
    """Padding explains a count that is too large, never one that is too small."""
    too_many = inv.check_prefill_rows(52, 48, site=SITE, subject="w")
    too_few = inv.check_prefill_rows(44, 48, site=SITE, subject="w")
    assert too_many is not None and too_many.cause is not None and "padded token count" in too_many.message
    assert too_few is not None and too_few.cause is None
    assert "Likely cause: not determined from these numbers" in too_few.message
    short = dict(real_tokens=48, cg_mode="PIECEWISE", speculator="S", num_reqs=12, site=SITE)
    v = inv.check_draft_token_count(
        handed_tokens=44, descriptor_tokens=None, dispatched_tokens=None, dp_size=None, **short
    )
    assert v is not None and v.cause is None and "4 tokens short" in v.message
    layer = dict(causal=False, multi_token=True, num_decode_tokens=8, num_decodes=2, site=SITE, subject="L")
    assert inv.check_noncausal_layer(layer_non_causal=False, **layer).cause is None
    assert (
        "recorded such a group"
        in inv.check_noncausal_layer(layer_non_causal=False, mixed_group_recorded=True, **layer).cause
    )


def test_uniform_reshape_mismatch() -> None:
    assert inv.uniform_reshape_mismatch([4, 4, 4], 4) is None
    assert inv.uniform_reshape_mismatch([4, 4, 0], 4) is None  # a graph-padding request of no tokens
    assert inv.uniform_reshape_mismatch([4, 4, 1], 3) == (3, 0, 3, 1)
    assert inv.uniform_reshape_mismatch([2, 0], 1) == (1, 0, 1, 1)
    assert not inv.decode_needs_ragged_launch([1, 1, 1], 3)
    assert inv.decode_needs_ragged_launch([4, 4, 2], 10) and inv.decode_needs_ragged_launch([4, 4, 1], 9)


def _numbers(**over) -> inv.MetadataNumbers:
    fields = dict(
        num_reqs=12,
        num_actual_tokens=48,
        max_query_len=4,
        qsl_cpu_len=13,
        qsl_len=13,
        qsl_first=0,
        qsl_end=48,
        first_decrease=None,
        longest_query=4,
        slot_rows=48,
        block_table_rows=12,
        seq_lens_rows=12,
        dcp_local_seq_lens_rows=None,
    )
    fields.update(over)
    return inv.MetadataNumbers(**fields)


def test_common_metadata_invariants() -> None:
    def check(padding_allowed=False, **over):
        return inv.check_common_metadata(_numbers(**over), padding_allowed=padding_allowed, site="B.build", subject="L")

    assert check() is None
    assert check(padding_allowed=True, num_actual_tokens=52, slot_rows=52) is None
    seed = check(num_actual_tokens=52, slot_rows=52)
    assert seed is not None and seed.check == "G0" and seed.rules == ("SG103", "SG101")
    assert "query_start_loc_cpu[num_reqs] (48) != num_actual_tokens (52) for 12 requests outside FULL" in seed.message
    assert "4 tokens that no request owns" in seed.message and "padded token count" in seed.cause
    over = check(padding_allowed=True, num_actual_tokens=44, slot_rows=44)
    assert over is not None and over.cause is None  # more tokens owned than the batch has: never padding
    sliced = check(num_actual_tokens=52)
    assert "slot_mapping has 48 rows for num_actual_tokens=52" in sliced.message
    dcp = check(dcp_local_seq_lens_rows=11)
    assert dcp.rules == ("SG105",) and "dcp_local_seq_lens has 11 rows for num_reqs=12" in dcp.message


def test_preplanned_batch_judges_the_recorded_shape() -> None:
    """G6: the shape recorded at the mark against the batch's now; padding (larger) names the cause."""
    assert inv.check_preplanned_batch(3, 3, 3, 3, site="s", subject="b") is None
    assert inv.check_preplanned_batch(None, None, 4, 4, site="s", subject="b") is None  # nothing recorded
    grown = inv.check_preplanned_batch(2, 6, 4, 12, site="s", subject="b")
    assert grown is not None and grown.check == "G6" and grown.rules == ("SG106",)
    assert "planned for 2 requests and 6 tokens" in grown.summary and "has 4 requests and 12 tokens" in grown.summary
    assert grown.cause is not None and "padded after its metadata was planned" in grown.cause
    assert grown.facts == {"planned_batch_size": 2, "planned_num_tokens": 6, "batch_size": 4, "num_tokens": 12}
    rows_only = inv.check_preplanned_batch(3, 12, 3, 16, site="s", subject="b")
    assert rows_only is not None and rows_only.cause is not None
    shrunk = inv.check_preplanned_batch(4, 4, 2, 2, site="s", subject="b")
    assert shrunk is not None and shrunk.cause is None  # not padding: the numbers do not say why


def test_an_unassessed_sglang_runs_raise_as_warn() -> None:
    from specguard.runtime.frameworks import SGLANG
    from specguard.runtime.install import effective_mode

    assert effective_mode("raise", {"sglang": "0.5.23"}, SGLANG) == ("raise", "")
    mode, why = effective_mode("raise", {"sglang": "0.5.24"}, SGLANG)
    assert mode == "warn" and why.startswith(
        "asked for raise; SGLang 0.5.24 is outside the releases this guard was assessed on (0.5.23)"
    )

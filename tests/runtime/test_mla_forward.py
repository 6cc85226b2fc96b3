"""G1/G2/G3 on the real vLLM 0.33.0 `FlashInferMLAImpl.forward_mqa`, driven with CPU tensors."""

from __future__ import annotations

import logging

import pytest

from specguard.runtime import SpecGuardViolation, stats
from specguard.runtime.patching import is_wrapped
from specguard.runtime.scalar_reads import ScalarReads

# (q_lens, causal, dcp_world_size): the launches vLLM makes in serving
CONSISTENT = {
    "causal-decode": ([1, 1, 1, 1], True, 1),
    "causal-spec-decode-ragged": ([3, 1, 4, 2], True, 1),
    "noncausal-flattened": ([4, 4, 4], False, 1),
    "dcp-causal": ([2, 2, 2], True, 2),
    "dcp-noncausal-flattened": ([4, 4, 4], False, 2),
}


def _launch(mla, q_lens, causal, dcp, *, q_rows=None, block_rows=None):
    impl = mla.impl(dcp_world_size=dcp, dcp_rank=dcp - 1)
    md = mla.metadata(q_lens, causal=causal, dcp=dcp > 1, block_rows=block_rows)
    q = mla.query(sum(q_lens) if q_rows is None else q_rows)
    return impl, md, q


@pytest.mark.parametrize("case", sorted(CONSISTENT))
def test_consistent_launches_pass_and_reach_the_kernel_once(mla, guard, case) -> None:
    q_lens, causal, dcp = CONSISTENT[case]
    guard("raise")
    assert is_wrapped(mla.fm.FlashInferMLAImpl.forward_mqa)
    impl, md, q = _launch(mla, q_lens, causal, dcp)
    mla.forward(impl, q, md, mla.layer(non_causal=not causal))
    assert len(mla.calls) == 1
    call = mla.calls[0]
    assert call.get("enable_dcp", False) is (dcp > 1)
    s = stats()
    assert s["violations"] == {} and s["guard_errors"] == {} and s["skips"] == {}
    assert s["checks_run"] == {
        "G0:FlashInferMLAMetadataBuilder.build(target)": 1,
        "G1+G3:FlashInferMLAImpl.forward_mqa": 1,
        "G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla": 1,
        **({"G5:FlashInferMLAMetadataBuilder.build(target)": 1} if dcp > 1 else {}),  # rank-local lengths
    }


def test_query_rows_vs_num_decode_tokens(mla, guard) -> None:
    guard("raise")
    impl, md, q = _launch(mla, [2, 2, 2, 2], True, 1, q_rows=9)
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer())
    assert mla.calls == []
    msg = str(err.value)
    assert "[specguard G1 tokens vs query layout] FlashInferMLAImpl.forward_mqa" in msg
    assert "query rows (9) do not match attn_metadata.num_decode_tokens (8)" in msg
    assert f"layer {mla.LAYER}" in msg and "SG103 padded-token-count" in msg


def test_short_block_table(mla, guard) -> None:
    guard("raise")
    impl, md, q = _launch(mla, [1, 1, 1, 1], True, 1, block_rows=3)
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer())
    assert mla.calls == []
    msg = str(err.value)
    assert "[specguard G2 MLA/DCP launch geometry]" in msg
    assert "batch rows disagree: query=4, block_tables=3, seq_lens=4" in msg
    assert "SG202 dcp-causal-bound-geometry" in msg


def test_global_causal_bound_left_per_request(mla, guard) -> None:
    """The second seed: non-causal flattening expands block_table and seq_lens to one row per query token;
    the pre-fix code left the DCP global causal bound per request."""
    guard("raise")
    impl, md, q = _launch(mla, [4, 4, 4], False, 2)
    real = impl._flattened_decode_metadata

    def flatten_without_row_map(attn_metadata, num_rows):
        block_table, seq_lens, _ = real(attn_metadata, num_rows)
        return block_table, seq_lens, None  # the global bound is then passed unexpanded

    impl._flattened_decode_metadata = flatten_without_row_map
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer(non_causal=True))
    assert mla.calls == []
    msg = str(err.value)
    assert "query=12, block_tables=12, seq_lens=12, causal_seqlens_kv_global=3" in msg
    assert "left the DCP global causal bound (dcp_tot_seq_lens) per request" in msg
    assert f"layer {mla.LAYER}" in msg


def test_noncausal_metadata_on_a_causal_layer(mla, guard) -> None:
    """G3 stops the launch; it names the mixed KV-cache group as the cause only once G3 recorded one."""
    import dataclasses

    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    guard("raise")
    messages = []
    for _ in range(2):
        impl, md, q = _launch(mla, [4, 4], False, 1)
        with pytest.raises(SpecGuardViolation) as err:
            mla.forward(impl, q, md, mla.layer(non_causal=False))
        messages.append(str(err.value))
        spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=mla.torch.bfloat16)
        MLAAttentionSpec.merge([spec, dataclasses.replace(spec, non_causal_multi_token_decode=True)])
    assert mla.calls == []
    for msg in messages:
        assert "[specguard G3 group causal consistency]" in msg and "SG201 group-flag-any-merge" in msg
    assert "Likely cause: not determined" in messages[0]
    assert "(G3 recorded such a group at merge)" in messages[1]


@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_what_cfg104s_fix_says_g3_does(mla, guard, mode) -> None:
    """CFG104's fix sends the operator to G3: a mixed KV-cache group is recorded at the merge, never raised, and
    the launch that hands non-causal metadata to a causal layer is stopped (in warn mode: logged, and it runs)."""
    import dataclasses

    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from specguard.deploy.catalogue import load_catalogue

    fix = " ".join(load_catalogue().hazards["CFG104"].fix.split())
    assert "records a KV-cache group whose layers disagree" in fix and "never raised" in fix
    assert "stops a FlashInfer MLA launch that hands non-causal metadata to a causal layer" in fix
    assert "(VLLM_SPECGUARD=warn logs it instead)" in fix

    guard(mode)
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=mla.torch.bfloat16)
    merged = MLAAttentionSpec.merge([spec, dataclasses.replace(spec, non_causal_multi_token_decode=True)])
    assert merged.non_causal_multi_token_decode is True  # vLLM's union stands: recorded, not raised
    assert stats()["recorded"] == {"G3:MLAAttentionSpec.merge": 1}
    impl, md, q = _launch(mla, [4, 4], False, 1)
    if mode == "raise":
        with pytest.raises(SpecGuardViolation, match=r"\[specguard G3 group causal consistency\]"):
            mla.forward(impl, q, md, mla.layer(non_causal=False))
        assert mla.calls == []
    else:
        mla.forward(impl, q, md, mla.layer(non_causal=False))
        assert len(mla.calls) == 1
    assert stats()["violations"] == {"G3:FlashInferMLAImpl.forward_mqa": 1}


def test_noncausal_dcp_needs_backend_support(mla, guard, monkeypatch) -> None:
    guard("raise")
    monkeypatch.setattr(mla.fm.FlashInferMLAMetadataBuilder, "supports_non_causal_multi_token_dcp", False)
    impl, md, q = _launch(mla, [4, 4], False, 2)
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer(non_causal=True))
    assert "does not declare supports_non_causal_multi_token_dcp" in str(err.value)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_warn_mode_logs_once_counts_and_launches(mla, guard) -> None:
    from specguard.runtime.policy import POLICY

    guard("warn")
    logger = POLICY._log()
    handler = Records()
    logger.addHandler(handler)  # on the logger itself: vLLM's "vllm" logger may not propagate to root
    try:
        for _ in range(3):
            impl, md, q = _launch(mla, [2, 2, 2, 2], True, 1, q_rows=9)
            mla.forward(impl, q, md, mla.layer())
    finally:
        logger.removeHandler(handler)
    assert logger.name == "vllm.specguard"  # vLLM's logger, under vLLM's handler and level
    assert len(mla.calls) == 3  # never raised: every launch proceeded
    assert stats()["violations"] == {"G1:FlashInferMLAImpl.forward_mqa": 3}
    logged = [r.getMessage() for r in handler.records if "[specguard G1" in r.getMessage()]
    assert len(logged) == 1 and "query rows (9)" in logged[0]


def test_a_bug_in_the_guard_never_breaks_the_launch(mla, guard, monkeypatch) -> None:
    from specguard.runtime import adapt_mla

    guard("raise")

    def broken(bound):
        raise RuntimeError("guard bug")

    monkeypatch.setattr(adapt_mla, "_check_kernel", broken)
    impl, md, q = _launch(mla, [1, 1], True, 1)
    md.decode.block_table = md.decode.block_table.long()  # off the fast path, into the (broken) full check
    mla.forward(impl, q, md, mla.layer())
    assert len(mla.calls) == 1
    assert stats()["guard_errors"] == {"G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla": 1}


@pytest.mark.parametrize("case", sorted(CONSISTENT))
def test_guard_adds_no_scalar_reads(mla, guard, case) -> None:
    q_lens, causal, dcp = CONSISTENT[case]

    def reads() -> int:
        impl, md, q = _launch(mla, q_lens, causal, dcp)
        with ScalarReads() as mode:
            mla.forward(impl, q, md, mla.layer(non_causal=not causal))
        return mode.count

    unguarded = reads()
    guard("raise")
    guarded = reads()
    assert guarded == unguarded
    assert stats()["checks_run"]["G1+G3:FlashInferMLAImpl.forward_mqa"] == 1


def test_uninstall_restores_the_originals(mla, guard) -> None:
    from specguard.runtime import install

    before = mla.fm.FlashInferMLAImpl.__dict__["forward_mqa"], mla.fm.trtllm_batch_decode_with_kv_cache_mla
    guard("raise")
    guard("raise")  # idempotent: a second register() wraps nothing twice
    wrapped = mla.fm.FlashInferMLAImpl.__dict__["forward_mqa"]
    assert wrapped.__specguard_original__ is before[0]
    install.uninstall()
    assert mla.fm.FlashInferMLAImpl.__dict__["forward_mqa"] is before[0]
    assert mla.fm.trtllm_batch_decode_with_kv_cache_mla is before[1]


def test_flashinfer_entry_keeps_its_parameters_under_the_guard(mla, guard) -> None:
    """On FlashInfer's real entry the G2 wrapper mirrors its signature (no kwargs dict per launch); on a
    `**kwargs` stand-in it falls back to a generic wrapper. Both check the same."""
    import inspect

    entry = mla.fm.trtllm_batch_decode_with_kv_cache_mla
    guard("raise")
    wrapped = mla.fm.trtllm_batch_decode_with_kv_cache_mla
    params = list(inspect.signature(wrapped, follow_wrapped=False).parameters)
    if mla.placement == "impl":
        assert params == list(inspect.signature(entry).parameters)
        assert "block_tables" in params and "causal_seqlens_kv_global" in params
    else:
        assert params == ["args", "kwargs"]


# Issue 12 item 4: vLLM 0.33.0 with DCP=2 and MTP k=3 (the builder takes decodes of up to 4 tokens) and
# a request shorter than the others: with DCP, forward_mqa skips the ragged launch and, since the total
# divides, views the query as (num_decodes, total / num_decodes, heads, dim).
def _ragged_dcp_launch(mla, q_lens):
    impl = mla.impl(dcp_world_size=2, dcp_rank=1)
    md = mla.metadata(q_lens, causal=True, dcp=True)
    return impl, md, mla.query(sum(q_lens))


def test_ragged_decode_under_dcp_is_silent_without_the_guard(mla) -> None:
    """The reproduction: query lengths [4, 4, 1] launch as (3, 3, heads, dim); request 0's 4th token is
    attended as request 1's, and nothing in vLLM or the kernel entry complains."""
    impl, md, q = _ragged_dcp_launch(mla, [4, 4, 1])
    mla.forward(impl, q, md, mla.layer())
    (call,) = mla.calls
    assert tuple(call["query"].shape) == (3, 3, mla.HEADS, mla.KV_LORA + mla.ROPE)
    assert call["block_tables"].shape[0] == 3 and call["enable_dcp"] is True


def test_ragged_decode_under_dcp_on_the_uniform_reshape_is_stopped(mla, guard) -> None:
    guard("raise")
    impl, md, q = _ragged_dcp_launch(mla, [4, 4, 1])
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer())
    assert mla.calls == []
    msg = str(err.value)
    assert "[specguard G2 MLA/DCP launch geometry] flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla" in msg
    assert f"layer {mla.LAYER}" in msg
    assert "launched as 3 requests x 3 tokens (3, 3, 16, 576)" in msg
    assert "query lengths [4, 4, 1] (query_start_loc_cpu at metadata build)" in msg
    assert "token row 3 (request 0's token 4) is attended as request 1's" in msg
    assert "Likely cause: a ragged decode batch under DCP, where forward_mqa has no ragged" in msg
    assert "Static rule that finds it: none" in msg


def test_uneven_ragged_decode_under_dcp_names_its_cause(mla, guard) -> None:
    """Issue 12 item 5: [4, 4, 2] does not divide, vLLM unsqueezes the query to one row per token, and the
    rows disagree; the cause is the ragged decode under DCP, not the seeds' expansion bugs."""
    guard("raise")
    impl, md, q = _ragged_dcp_launch(mla, [4, 4, 2])
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer())
    msg = str(err.value)
    assert "batch rows disagree: query=10, block_tables=3, seq_lens=3, causal_seqlens_kv_global=3" in msg
    assert "decode_query_lens=[4, 4, 2]" in msg
    assert "Likely cause: a ragged decode batch under DCP" in msg
    assert "gave the query one row per token while block_tables/seq_lens stay one row per request" in msg
    assert "expanded, sliced or padded" not in msg


def test_rows_that_disagree_without_a_known_pattern_name_no_cause(mla, guard) -> None:
    """ "Likely cause" only when the numbers show one."""
    guard("raise")
    impl, md, q = _launch(mla, [1, 1, 1, 1], True, 1, block_rows=3)
    with pytest.raises(SpecGuardViolation) as err:
        mla.forward(impl, q, md, mla.layer())
    assert "Likely cause: not determined from these numbers" in str(err.value)


@pytest.mark.parametrize("q_lens", [[4, 4, 4], [1, 1, 1], [3, 3]])
def test_uniform_decodes_under_dcp_pass(mla, guard, q_lens) -> None:
    guard("raise")
    impl, md, q = _ragged_dcp_launch(mla, q_lens)
    mla.forward(impl, q, md, mla.layer())
    assert len(mla.calls) == 1
    s = stats()
    assert s["violations"] == {} and s["skips"] == {} and s["guard_errors"] == {}


def test_ragged_decode_in_warn_mode_is_counted_and_launches(mla, guard) -> None:
    guard("warn")
    for _ in range(2):
        impl, md, q = _ragged_dcp_launch(mla, [4, 4, 1])
        mla.forward(impl, q, md, mla.layer())
    assert len(mla.calls) == 2
    assert stats()["violations"] == {"G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla": 2}


def test_metadata_built_before_the_guard_is_skipped_on_the_reshape_not_trusted(mla, guard) -> None:
    """No recorded query lengths (the build did not go through the guard): the uniform-reshape launch of a
    multi-token decode is counted as a skip, never cleared silently."""
    impl, md, q = _ragged_dcp_launch(mla, [4, 4, 4])  # built unguarded
    guard("raise")
    mla.forward(impl, q, md, mla.layer())
    assert len(mla.calls) == 1
    (skip,) = stats()["skips"]
    assert skip.startswith("G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla:decode query lengths not")


def test_a_rebound_kernel_name_is_reported_once(mla, guard) -> None:
    """Issue 12 item 6: something rebinds the name G2 wrapped after install; the first guarded forward_mqa
    reports it (counted once, logged once), and the launch still proceeds."""
    guard("raise")
    rebound_calls = []

    def other_plugin_kernel(**kwargs):
        rebound_calls.append(kwargs)
        return mla.torch.zeros(*kwargs["query"].shape[:-1], mla.KV_LORA)

    with pytest.MonkeyPatch.context() as rebind:  # undone before the guard is uninstalled
        rebind.setattr(mla.fm, "trtllm_batch_decode_with_kv_cache_mla", other_plugin_kernel)
        for _ in range(3):
            impl, md, q = _launch(mla, [1, 1], True, 1)
            mla.forward(impl, q, md, mla.layer())
    assert len(rebound_calls) == 3
    assert stats()["skips"] == {
        "G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla:"
        "vllm.v1.attention.backends.mla.flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla was rebound after "
        "the guard wrapped it (now test_mla_forward.test_a_rebound_kernel_name_is_reported_once.<locals>."
        "other_plugin_kernel): G2 does not see these launches": 1
    }


def test_a_plugin_that_wraps_the_guarded_kernel_keeps_g2(mla, guard) -> None:
    import functools

    guard("raise")
    guarded = mla.fm.trtllm_batch_decode_with_kv_cache_mla

    @functools.wraps(guarded)
    def timing_wrapper(*args, **kwargs):
        return guarded(*args, **kwargs)

    with pytest.MonkeyPatch.context() as rebind:
        rebind.setattr(mla.fm, "trtllm_batch_decode_with_kv_cache_mla", timing_wrapper)
        impl, md, q = _launch(mla, [1, 1], True, 1)
        mla.forward(impl, q, md, mla.layer())
    assert stats()["skips"] == {}
    assert stats()["checks_run"]["G2:flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla"] == 1

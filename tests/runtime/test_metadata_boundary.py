"""G0 at the attention-metadata boundary, on vLLM 0.33.0's real code driven with CPU tensors: the V2
runner's `build_attn_metadata`, the V1 runner's `AttentionGroup` (target and draft builds), the real CPU
attention backend's builder and the FlashInfer MLA builder, builder classes vLLM creates at runtime and
one defined by an out-of-tree plugin. vLLM 0.28.0's code is driven by seed1_probe.py
(test_seed1_draft_tokens.py)."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sg_runtime_helpers import CPU_LAYERS, cpu_config
from sg_runtime_helpers import common_metadata as _cm
from vllm.v1.attention import backend as vb
from vllm.v1.attention.backends import cpu_attn
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.utils import AttentionGroup

from specguard.runtime import SpecGuardViolation, stats
from specguard.runtime.scalar_reads import ScalarReads

SPEC = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
LAYER = CPU_LAYERS[0]


def _v2_build(builder, *, num_tokens: int, q_lens: list[int]):
    """vLLM 0.33.0's V2 runner entry: build_attn_metadata for one KV-cache group with one attention group."""
    n = len(q_lens)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    group = AttentionGroup(
        backend=cpu_attn.CPUAttentionBackend,
        layer_names=list(builder.layer_names),
        kv_cache_spec=SPEC,
        kv_cache_group_id=0,
        metadata_builders=[builder],
    )
    return attn_utils.build_attn_metadata(
        attn_groups=[[group]],
        num_reqs=n,
        num_tokens=num_tokens,
        query_start_loc_gpu=qsl.clone(),
        query_start_loc_cpu=qsl,
        max_query_len=max(q_lens),
        seq_lens=torch.full((n,), 64, dtype=torch.int32),
        max_seq_len=64,
        block_tables=[torch.zeros(n, 8, dtype=torch.int32)],
        slot_mappings=torch.zeros(1, 256, dtype=torch.int64),
        kv_cache_config=types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=SPEC)]),
    )


SEED = [4] * 12  # the first seed: 12 requests x 4 draft query tokens = 48 real tokens, DP-padded to 52


def test_seed_numbers_are_caught_before_the_backend_builds(cpu_builder, guard) -> None:
    guard("raise")
    builder = cpu_builder()
    with pytest.raises(SpecGuardViolation) as err:
        _v2_build(builder, num_tokens=52, q_lens=SEED)
    assert builder.seen == []  # the CPU backend never saw the metadata
    msg = str(err.value)
    assert msg.startswith(
        "[specguard G0 attention metadata boundary] CPUAttentionMetadataBuilder.build(target) "
        f"(layers {LAYER} (+1 more)): query_start_loc_cpu[num_reqs] (48) != num_actual_tokens (52) for 12 "
        "requests outside FULL CUDA graphs (this batch: not dispatched where the guard sees it; this process "
        "captures no FULL graph): 4 tokens that no request owns."
    )
    assert "Likely cause: the attention metadata was built with a padded token count" in msg
    assert "Static rule that finds it: SG103 padded-token-count, SG101 metadata-outside-helper." in msg


def test_healthy_v2_build_runs_the_backend_once_per_build(cpu_builder, guard) -> None:
    guard("raise")
    builder = cpu_builder()
    metadata = _v2_build(builder, num_tokens=48, q_lens=SEED)
    assert set(metadata) == {LAYER, "model.layers.1.self_attn.attn"}  # one build serves the whole group
    assert len(builder.seen) == 1
    s = stats()
    assert s["checks_run"] == {"G0:CPUAttentionMetadataBuilder.build(target)": 1}
    assert s["violations"] == s["skips"] == s["guard_errors"] == {}


def test_v1_draft_build_is_checked_once_as_a_draft(cpu_builder, guard) -> None:
    """vLLM's V1 proposers build through AttentionGroup.build_metadata_for_drafting ->
    builder.build_for_drafting (the base class's) -> build: one check, counted as a draft build."""
    guard("raise")
    builder = cpu_builder()
    group = AttentionGroup(cpu_attn.CPUAttentionBackend, [LAYER], SPEC, 0, metadata_builders=[builder])
    group.build_metadata_for_drafting(_cm([1, 1, 1]), draft_index=1)
    group.build_metadata(_cm([5, 1, 1]))
    assert stats()["checks_run"] == {
        "G0:CPUAttentionMetadataBuilder.build(target)": 1,
        "G0:CPUAttentionMetadataBuilder.build_for_drafting(draft)": 1,
        "G5:CPUAttentionMetadataBuilder.build_for_drafting(draft)": 1,  # the draft's lengths, after G0
    }
    with pytest.raises(SpecGuardViolation, match=r"build_for_drafting\(draft\).*\(7\) != num_actual_tokens \(11\)"):
        group.build_metadata_for_drafting(_cm([1, 3, 3], num_actual_tokens=11), draft_index=0)


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"query_start_loc_cpu": torch.tensor([0, 2, 4], dtype=torch.int32)}, "query_start_loc_cpu has 3"),
        ({"query_start_loc_cpu": torch.tensor([1, 3, 5, 7], dtype=torch.int32)}, "starts at 1, not 0"),
        ({"query_start_loc_cpu": torch.tensor([0, 4, 2, 6], dtype=torch.int32)}, "decreases after request 1"),
        ({"max_query_len": 1}, "max_query_len (1) is below the longest query in query_start_loc_cpu (2)"),
        ({"slot_mapping": torch.zeros(5, dtype=torch.int64)}, "slot_mapping has 5 rows for num_actual_tokens=6"),
        ({"block_table_tensor": torch.zeros(2, 8, dtype=torch.int32)}, "block_table_tensor has 2 rows"),
        ({"seq_lens": torch.zeros(2, dtype=torch.int32)}, "seq_lens has 2 rows for num_reqs=3"),
        ({"dcp_local_seq_lens": torch.zeros(2, dtype=torch.int32)}, "dcp_local_seq_lens has 2 rows"),
    ],
)
def test_each_invariant_names_what_disagrees(cpu_builder, guard, over, needle) -> None:
    guard("raise")
    builder = cpu_builder()
    with pytest.raises(SpecGuardViolation) as err:
        builder.build(0, _cm([2, 2, 2], **over))
    assert needle in str(err.value)
    assert builder.seen == []


def test_more_tokens_than_the_batch_holds_pass_only_where_full_graphs_can_replay(cpu_builder, guard) -> None:
    guard("raise")
    # a GPU config that captures FULL graphs: padded tokens no request owns are legal there
    full = cpu_builder(cpu_config("FULL_AND_PIECEWISE", [1, 2, 4, 8]))
    full.build(0, _cm([4, 4], num_actual_tokens=12))
    # ... but never a query that owns more tokens than the batch has
    with pytest.raises(SpecGuardViolation, match=r"query_start_loc_cpu\[num_reqs\] \(8\) != num_actual_tokens \(6\)"):
        full.build(0, _cm([4, 4], num_actual_tokens=6))
    for config in (cpu_config("PIECEWISE", [1, 2]), cpu_config("FULL_AND_PIECEWISE", [])):
        with pytest.raises(SpecGuardViolation, match="outside FULL CUDA graphs"):
            cpu_builder(config).build(0, _cm([4, 4], num_actual_tokens=12))


def test_warn_mode_counts_and_the_backend_still_builds(cpu_builder, guard) -> None:
    guard("warn")
    builder = cpu_builder()
    for _ in range(3):
        _v2_build(builder, num_tokens=52, q_lens=SEED)
    assert len(builder.seen) == 3
    assert stats()["violations"] == {"G0:CPUAttentionMetadataBuilder.build(target)": 3}


def test_g0_adds_no_scalar_reads(cpu_builder, guard) -> None:
    def reads() -> int:
        cm = _cm([3, 1, 4, 2])
        with ScalarReads() as mode:
            cpu_builder().build(0, cm)
        return mode.count

    unguarded = reads()
    guard("raise")
    assert reads() == unguarded
    assert stats()["checks_run"] == {"G0:CPUAttentionMetadataBuilder.build(target)": 1}


def test_builders_defined_after_install_and_delegating_builders(guard) -> None:
    """A plugin's builder class defined after the guard is on, and one that delegates to super().build
    with a rewritten metadata (as vLLM's runtime-made chunked-local builders do), are each checked once,
    on the metadata the runner handed them."""
    guard("raise")

    class PluginBuilder(vb.AttentionMetadataBuilder):
        def __init__(self) -> None:
            self.layer_names = ["plugin.attn"]
            self.vllm_config = cpu_config()
            self.built: list[int] = []

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            self.built.append(common_attn_metadata.num_actual_tokens)
            return self.built[-1]

    class Delegating(PluginBuilder):
        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            local = common_attn_metadata.replace(num_actual_tokens=999)  # inner metadata, not re-checked
            return super().build(common_prefix_len, local, fast_build)

    plugin, delegating = PluginBuilder(), Delegating()
    assert plugin.build(0, _cm([2, 2])) == 4
    assert delegating.build(0, common_attn_metadata=_cm([2, 2])) == 999
    assert plugin.build_for_cudagraph_capture(_cm([1, 1], num_actual_tokens=4)) == 4  # capture may pad
    with pytest.raises(SpecGuardViolation, match=r"PluginBuilder\.build\(target\) \(layers plugin\.attn\)"):
        plugin.build(0, _cm([2, 2], num_actual_tokens=5))
    assert stats()["checks_run"] == {
        "G0:Delegating.build(target)": 1,
        "G0:PluginBuilder.build(target)": 2,
        "G0:PluginBuilder.build_for_cudagraph_capture(capture)": 1,
    }


def test_uninstall_unwraps_every_builder_and_the_subclass_hook(cpu_builder, guard) -> None:
    from specguard.runtime import install
    from specguard.runtime.patching import is_wrapped

    build = cpu_attn.CPUAttentionMetadataBuilder.__dict__["build"]
    guard("raise")
    assert is_wrapped(cpu_attn.CPUAttentionMetadataBuilder.__dict__["build"])
    assert "__init_subclass__" in vb.AttentionMetadataBuilder.__dict__
    install.uninstall()
    assert cpu_attn.CPUAttentionMetadataBuilder.__dict__["build"] is build
    assert "__init_subclass__" not in vb.AttentionMetadataBuilder.__dict__

    class Later(vb.AttentionMetadataBuilder):
        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            return None

    assert not is_wrapped(Later.__dict__["build"])


def test_mla_builder_records_decode_query_lengths(mla, guard) -> None:
    """The FlashInfer MLA build (real 0.33.0 code) is checked by G0 and records, for G2, whether its decode
    requests can be launched uniformly."""
    from specguard.runtime.adapt_mla import DECODE_LENS_ATTR

    guard("raise")
    assert getattr(mla.metadata([4, 4, 1], dcp=True), DECODE_LENS_ATTR) == (4, 4, 1)
    assert getattr(mla.metadata([4, 4, 4], dcp=True), DECODE_LENS_ATTR) is False
    assert stats()["checks_run"] == {  # G5: the DCP builds' rank-local lengths
        "G0:FlashInferMLAMetadataBuilder.build(target)": 2,
        "G5:FlashInferMLAMetadataBuilder.build(target)": 2,
    }


@settings(max_examples=300, deadline=None)
@given(
    q_lens=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    token_delta=st.integers(-3, 3),
    max_query_delta=st.integers(-2, 2),
    shuffled=st.booleans(),
    short_rows=st.sampled_from(["", "slot_mapping", "block_table_tensor", "seq_lens", "query_start_loc"]),
    dcp_rows_delta=st.sampled_from([None, -1, 0, 1]),
)
def test_the_fast_path_clears_exactly_what_the_full_check_clears(
    q_lens, token_delta, max_query_delta, shuffled, short_rows, dcp_rows_delta
) -> None:  # type: ignore[no-untyped-def]
    """G0 decides a healthy build from the fewest reads; it may send a build to the full check, never clear one
    the full check would report (and it clears every build that is healthy whatever the graph mode)."""
    from specguard.runtime import adapt_metadata
    from specguard.runtime import invariants as inv

    n, total = len(q_lens), sum(q_lens)
    over: dict[str, object] = {"max_query_len": max(max(q_lens) + max_query_delta, 0)}
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    if shuffled and n > 1:
        qsl = qsl.flip(0)
    over |= {"query_start_loc_cpu": qsl, "query_start_loc": qsl.clone()}
    if short_rows:
        rows = {"slot_mapping": total, "query_start_loc": n + 1}.get(short_rows, n) - 1
        over[short_rows] = torch.zeros(max(rows, 0), dtype=torch.int32)
    if dcp_rows_delta is not None:
        over["dcp_local_seq_lens"] = torch.zeros(max(n + dcp_rows_delta, 0), dtype=torch.int32)
    cm = _cm(q_lens, num_actual_tokens=max(total + token_delta, 0), **over)
    full = {
        allowed: inv.check_common_metadata(
            adapt_metadata.metadata_numbers(cm), padding_allowed=allowed, site="s", subject="x"
        )
        for allowed in (False, True)
    }
    fast = adapt_metadata._healthy_offsets(cm) is not None
    if fast:
        assert full == {False: None, True: None}
    else:
        assert full[False] is not None  # healthy in every graph mode is never left to the slow path


def test_host_copies_of_query_start_loc_that_disagree_are_stopped(cpu_builder, guard) -> None:
    """Issue 18 item 2: on a CPU build both copies of query_start_loc are host memory; shifting only the one
    the kernels read gave heap corruption unguarded. G0 compares them, and stops the build in warn mode too."""
    healthy = _cm([3, 1, 4])
    shifted = healthy.query_start_loc + torch.tensor([0, 1, 1, 0], dtype=torch.int32)
    for mode in ("raise", "warn"):
        guard(mode)
        builder = cpu_builder()
        with pytest.raises(SpecGuardViolation) as err:
            builder.build(0, _cm([3, 1, 4], query_start_loc=shifted))
        assert builder.seen == []
        assert (
            "query_start_loc (host memory, what the kernels read) holds 4 at entry 1 where query_start_loc_cpu "
            "holds 3" in str(err.value)
        )
        assert ("Stopped although the guard runs in warn mode" in str(err.value)) == (mode == "warn")
    # a device copy is never read: on the meta device (shape, no values) nothing is compared
    builder = cpu_builder()
    builder.build(0, _cm([3, 1, 4], query_start_loc=torch.zeros(4, dtype=torch.int32, device="meta")))
    assert len(builder.seen) == 1


@settings(max_examples=200, deadline=None)
@given(q_lens=st.lists(st.integers(0, 9), min_size=1, max_size=12), at=st.integers(0, 12), by=st.integers(-2, 2))
def test_the_fast_path_clears_no_desync_the_full_check_reports(q_lens, at, by) -> None:  # type: ignore[no-untyped-def]
    from specguard.runtime import adapt_metadata
    from specguard.runtime import invariants as inv

    cm = _cm(q_lens)
    dev = cm.query_start_loc.clone()
    dev[min(at, len(q_lens))] += by
    cm = _cm(q_lens, query_start_loc=dev)
    full = inv.check_common_metadata(adapt_metadata.metadata_numbers(cm), padding_allowed=True, site="s", subject="x")
    assert (adapt_metadata._healthy_offsets(cm) is not None) == (full is None) == (by == 0)

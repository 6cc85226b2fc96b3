"""G5 draft lengths: the second seed's stale rank-local lengths reproduced on vLLM 0.33.0's real V2 speculator
helper (`DraftModelSpeculator._build_attn_metadata` and the `build_attn_metadata` it calls), and the V1 chain
of draft steps through a real builder's `build_for_drafting`. Only the device kernel that fills the
rank-local lengths (`prepare_dcp_local_seq_lens`, Triton) runs as CPU code, vLLM's own
`get_dcp_local_seq_lens`; the DCP process group is a stand-in naming this rank."""

from __future__ import annotations

import contextlib
import types
from typing import Any

import numpy as np
import pytest
from sg_runtime_helpers import common_metadata, cpu_config

WORLD, RANK, INTERLEAVE = 2, 1, 1
# The target step's global lengths: odd, so that the token each draft step adds lands on rank 1 and its share
# changes (with an even length rank 0 gets the next token and rank 1's share would stay the same).
TARGET_LENS = [41, 57, 33, 99]


def test_local_share_is_vllms_formula() -> None:
    """lengths.dcp_local_lengths against vLLM's own get_dcp_local_seq_lens, on every geometry it serves."""
    import torch
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

    from specguard.runtime.lengths import dcp_local_lengths

    seq = list(range(0, 300, 7)) + [1, 2, 63, 64, 65, 127, 128, 129]
    for world in (1, 2, 4, 8):
        for interleave in (1, 2, 16, 64):
            for rank in range(world):
                want = get_dcp_local_seq_lens(torch.tensor(seq), world, rank, interleave).tolist()
                assert dcp_local_lengths(seq, world, rank, interleave) == want, (world, rank, interleave)


@pytest.fixture
def v2(monkeypatch: pytest.MonkeyPatch) -> Any:
    """vLLM 0.33.0's EAGLE speculator (its base DraftModelSpeculator's shared helper) under DCP world 2 as rank
    1, its draft KV group served by an out-of-tree builder that records the rank-local lengths it is handed."""
    import torch
    from vllm.config.compilation import CUDAGraphMode
    from vllm.distributed import parallel_state
    from vllm.v1.attention.backend import AttentionMetadataBuilder
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.gpu.spec_decode import speculator as spec_mod
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
    from vllm.v1.worker.utils import AttentionGroup

    def prepare_on_cpu(out, seq_lens, num_reqs, dcp_size, dcp_rank, interleave, *, num_reqs_padded=None):
        out[:num_reqs] = get_dcp_local_seq_lens(seq_lens[:num_reqs], dcp_size, dcp_rank, interleave)
        return out[:num_reqs_padded]

    monkeypatch.setattr(spec_mod, "prepare_dcp_local_seq_lens", prepare_on_cpu)
    monkeypatch.setattr(parallel_state, "get_dcp_group", lambda: types.SimpleNamespace(rank_in_group=RANK))
    seen: list[list[int]] = []

    class DcpBuilder(AttentionMetadataBuilder):
        """An out-of-tree DCP backend's builder (world size and interleave, as vLLM's MLA builders keep them)."""

        def __init__(self) -> None:
            self.layer_names = ["draft.layers.0.attn"]
            self.dcp_world_size = WORLD
            self.cp_kv_cache_interleave_size = INTERLEAVE
            self.vllm_config = cpu_config("NONE")

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            seen.append(common_attn_metadata.dcp_local_seq_lens.tolist())

    kv_spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    group = AttentionGroup(
        backend=None, layer_names=["draft.layers.0.attn"], kv_cache_spec=kv_spec, kv_cache_group_id=0
    )
    group.metadata_builders = [DcpBuilder()]
    spec = object.__new__(EagleSpeculator)
    n = len(TARGET_LENS)
    seq = torch.zeros(64, dtype=torch.int32)
    seq[:n] = torch.tensor(TARGET_LENS)
    local = torch.zeros(64, dtype=torch.int32)
    local[:n] = get_dcp_local_seq_lens(seq[:n], WORLD, RANK, INTERLEAVE)  # what the target step left there
    spec.__dict__.update(
        dcp_size=WORLD,
        attn_groups=[[group]],
        kv_cache_config=types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=kv_spec)]),
        draft_max_seq_len=4096,
        draft_is_prefilling=torch.zeros(64, dtype=torch.bool),
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=4096)),
        block_tables=types.SimpleNamespace(
            input_block_tables=[torch.zeros(64, 8, dtype=torch.int32)],
            slot_mappings=torch.zeros(1, 256, dtype=torch.int64),
            cp_size=WORLD,
            cp_rank=RANK,
            cp_interleave=INTERLEAVE,
        ),
        input_buffers=types.SimpleNamespace(
            query_start_loc=torch.arange(65, dtype=torch.int32),  # one query token per request
            seq_lens=seq,
            positions=torch.zeros(256, dtype=torch.int64),
            dcp_local_seq_lens=local,
        ),
    )

    def step(k: int, **extra: Any) -> None:
        """Draft decode step k as the speculator makes it: seq_lens advanced by the k tokens drafted so far."""
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        seq[:n] = torch.tensor(TARGET_LENS) + k
        desc = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.NONE, num_tokens=n, num_reqs=None, uniform_token_count=1)
        spec._build_attn_metadata(
            num_reqs=n,
            batch_desc=desc,
            query_start_loc_np=np.arange(n + 1, dtype=np.int32),
            seq_lens_cpu_upper_bound=torch.tensor(TARGET_LENS, dtype=torch.int32),
            step=k,
            **extra,
        )

    return types.SimpleNamespace(spec=spec, step=step, seen=seen, stale=local)


def test_seed2_stale_local_lengths_caught_in_raise_mode(v2, guard) -> None:
    """The seed's bug: a draft step handed the rank-local lengths the target step left in the buffer."""
    from specguard.runtime import SpecGuardViolation, stats

    guard("raise")
    with pytest.raises(SpecGuardViolation) as exc:
        v2.step(1, dcp_local_seq_lens=v2.stale)
    msg = str(exc.value)
    assert "[specguard G5 draft lengths] DcpBuilder.build(draft)" in msg
    assert "draft step 1: dcp_local_seq_lens [20, 28, 16, 49] != this rank's share of seq_lens [42, 58, 34, 100]" in msg
    assert "[21, 29, 17, 50] (DCP world 2, rank 1, interleave 1)" in msg
    assert "computed from the global lengths before this step's tokens" in msg
    assert "SG105 stale-dcp-lens" in msg
    assert v2.seen == []  # stopped before the backend saw them
    assert stats()["violations"] == {"G5:DcpBuilder.build(draft)": 1}


def test_seed2_fixed_helper_recomputes_and_passes(v2, guard) -> None:
    """vLLM 0.33.0's own path: no lengths handed in, the helper recomputes them from this step's seq_lens."""
    from specguard.runtime import stats

    guard("raise")
    for k in (1, 2, 3):
        v2.step(k)
    assert v2.seen == [[21, 29, 17, 50], [21, 29, 17, 50], [22, 30, 18, 51]]  # rank 1 holds every second token
    s = stats()
    assert s["violations"] == {} and s["skips"] == {} and s["guard_errors"] == {}
    assert s["checks_run"]["G5:DcpBuilder.build(draft)"] == 3


def test_seed2_stale_lengths_logged_and_served_in_warn_mode(v2, guard) -> None:
    from specguard.runtime import stats

    guard("warn")
    v2.step(1, dcp_local_seq_lens=v2.stale)
    assert v2.seen == [[20, 28, 16, 49]]  # served as unguarded vLLM would
    assert stats()["violations"] == {"G5:DcpBuilder.build(draft)": 1}


BLOCK = 16  # the cpu_builder fixture's KV block size


def _slots(lens: list[int], q: list[int], table: Any) -> Any:
    """Where each query token's KV goes: the slot of its position (the last at seq_len - 1) in its request's
    block-table row, as vLLM's runners compute it."""
    import torch

    slots = [
        -1 if n is None else int(table[i, p // BLOCK]) * BLOCK + p % BLOCK  # None: vLLM's padding slot
        for i, (n, k) in enumerate(zip(lens, q, strict=True))
        for p in ([0] * k if n is None else range(n - k, n))
    ]
    return torch.tensor(slots, dtype=torch.int64)


def _chain(cpu_builder: Any, lens_per_step: list[list[int]], q_first: int = 1, written: list | None = None) -> None:
    """V1 draft steps 0..k through the real CPU builder's build_for_drafting: step 0 runs q_first query tokens
    per request, later steps one; each token written at the slot of its position (or, where `written` gives a
    step's lengths, at the slots those lengths imply: the positions the step really writes)."""
    import torch

    builder = cpu_builder()
    builder.vllm_config.model_config = types.SimpleNamespace(max_model_len=128)
    for k, lens in enumerate(lens_per_step):
        q = [q_first if k == 0 else 1] * len(lens)
        table = torch.arange(len(lens) * 8, dtype=torch.int32).view(-1, 8) + 1
        at = written[k] if written and written[k] else lens
        cm = common_metadata(
            q,
            seq_lens=torch.tensor(lens, dtype=torch.int32),
            max_seq_len=max(lens),
            block_table_tensor=table,
            slot_mapping=_slots(at, q, table),
        )
        builder.build_for_drafting(common_attn_metadata=cm, draft_index=k)


def test_v1_chain_of_draft_steps(cpu_builder, guard) -> None:
    from specguard.runtime import SpecGuardViolation, stats

    guard("raise")
    _chain(cpu_builder, [[10, 20], [11, 21], [12, 22]])  # healthy
    _chain(cpu_builder, [[10, 20], [8, 21], [9, 22]], q_first=4)  # step 0's rejected tokens taken off
    # a position past max_model_len: the step update sets the length to 1 and writes the padding slot
    _chain(cpu_builder, [[127, 20], [128, 21], [1, 22]], written=[None, None, [None, 22]])
    assert stats()["violations"] == {}
    with pytest.raises(SpecGuardViolation) as exc:  # step 2 reuses step 1's lengths
        _chain(cpu_builder, [[10, 20], [11, 21], [11, 21]])
    msg = str(exc.value)
    assert "[specguard G5 draft lengths] CPUAttentionMetadataBuilder.build_for_drafting(draft)" in msg
    assert "draft step 2: seq_lens [11, 21] do not follow from step 1's [11, 21]" in msg
    assert "first request 0: 11 where 12 was expected" in msg
    assert "reuses the previous step's lengths" in msg
    with pytest.raises(SpecGuardViolation, match="at most 11 is possible"):  # advanced past step 0's tokens
        _chain(cpu_builder, [[10, 20], [12, 21]], q_first=4)
    # step 1 after a multi-token step 0 (the rejected tokens come off on the device): the lengths are judged
    # by the slots the step writes: request 0 had one token rejected, so the step writes position 9 (length 10),
    # but its length was only rewound (9), not advanced
    with pytest.raises(SpecGuardViolation) as exc:
        _chain(cpu_builder, [[10, 20], [9, 21]], q_first=4, written=[None, [10, 21]])
    assert "draft step 1: request 0's last query token is written at slot 25, but seq_lens[0] = 9 puts it at " in str(
        exc.value
    )
    assert "position 8, slot 24; 1 of 2 requests disagree" in str(exc.value)


def test_device_lengths_are_a_counted_skip(cpu_builder, guard) -> None:
    """seq_lens in device memory (meta stands for it here) is never read: each build G5 would judge is a skip."""
    import torch

    from specguard.runtime import stats
    from specguard.runtime.adapt_lengths import DEVICE_LENGTHS

    guard("raise")
    builder = cpu_builder()
    cm = common_metadata([1, 1], seq_lens=torch.zeros(2, dtype=torch.int32, device="meta"))
    for k in (0, 1):
        with contextlib.suppress(Exception):  # the CPU builder itself cannot read meta lengths; G5 ran before it
            builder.build_for_drafting(common_attn_metadata=cm, draft_index=k)
    assert stats()["skips"] == {f"G5:CPUAttentionMetadataBuilder.build_for_drafting(draft):{DEVICE_LENGTHS}": 2}

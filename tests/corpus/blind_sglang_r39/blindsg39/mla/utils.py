"""Decode-context-parallel (DCP) helpers shared by the fork's MLA backends.

The DCP world is read here through module-level getters
(:func:`dcp_world_and_rank`, :func:`dcp_size_from_args`); the backends may
also cache it themselves (see :mod:`blindsg39.mla.mixins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def dcp_world_and_rank() -> Tuple[int, int]:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return 1, 0
    return parallel.dcp_size, parallel.dcp_rank


def dcp_size_from_args() -> int:
    return int(getattr(get_server_args(), "dcp_size", 1) or 1)


def local_kv_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    world, rank = dcp_world_and_rank()
    if world == 1:
        return seq_lens
    return get_dcp_lens(seq_lens, world, rank).to(torch.int32)


def local_max_seq_len(max_seq_len: int) -> int:
    world, rank = dcp_world_and_rank()
    if world == 1:
        return max_seq_len
    return max(max_seq_len // world + int(rank < max_seq_len % world), 1)


class DcpLens(NamedTuple):
    local: torch.Tensor
    global_lens: torch.Tensor


def split_dcp_lens(seq_lens: torch.Tensor) -> DcpLens:
    global_lens = seq_lens.to(torch.int32)
    return DcpLens(local=local_kv_lens(global_lens), global_lens=global_lens)


@dataclass
class DecodeLaunchArgs:
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    causal_seqs: Optional[torch.Tensor] = None


def decode_args_from_metadata(metadata, bs: int) -> DecodeLaunchArgs:
    """Launch arguments from per-step metadata (rank-local ``seq_lens_k``)."""
    return DecodeLaunchArgs(
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k[:bs],
        max_seq_len=metadata.max_seq_len_k,
        causal_seqs=(
            metadata.global_seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else None
        ),
    )


def decode_args_from_batch(metadata, forward_batch) -> DecodeLaunchArgs:
    """Launch arguments straight from the batch (no metadata lens hoisting)."""
    bs = forward_batch.batch_size
    return DecodeLaunchArgs(
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
        max_seq_len=metadata.max_seq_len_k,
    )


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
# expect: clean
def launch_cute_dsl_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    dims: Tuple[int, int, int],
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
):
    qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim = dims
    world, rank = dcp_world_and_rank()
    global_lens = seq_lens.to(torch.int32)
    if world == 1:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=workspace_buffer,
            qk_nope_head_dim=qk_nope_head_dim,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=global_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            backend="cute-dsl",
        )
    local_lens = local_kv_lens(global_lens)
    out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=local_lens,
        max_seq_len=local_max_seq_len(max_seq_len),
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=world,
        cp_rank=rank,
        causal_seqlens_kv_global=global_lens,
        return_lse=True,
    )
    return out, lse, local_lens


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
# expect: SG203
def launch_cute_dsl_decode_with_fixup(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    dims: Tuple[int, int, int],
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    q_indptr: torch.Tensor,
):
    qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim = dims
    world, rank = dcp_world_and_rank()
    global_lens = seq_lens.to(torch.int32)
    if world == 1:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=workspace_buffer,
            qk_nope_head_dim=qk_nope_head_dim,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=global_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            backend="cute-dsl",
        )
    local_lens = local_kv_lens(global_lens)
    out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=global_lens,
        max_seq_len=local_max_seq_len(max_seq_len),
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=world,
        cp_rank=rank,
        causal_seqlens_kv_global=global_lens,
        return_lse=True,
    )
    fixup_zero_kv_rows(out, lse, local_lens, q_indptr, 1)
    return out, lse


# idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (DCP branch)
# expect: clean
def plan_mla_decode_wrapper(
    wrapper,
    translator,
    plan,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_sum: int,
    q_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    head_dims: Tuple[int, int, int],
    sm_scale: float,
    dtype: torch.dtype,
):
    num_local_heads, kv_lora_rank, qk_rope_head_dim = head_dims
    bs = len(seq_lens)
    q_indptr = q_indptr[: bs + 1]
    kv_lens = seq_lens.to(torch.int32)
    kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, dim=0)
    kv_indptr = kv_indptr[: bs + 1]
    kv_indices = torch.empty(seq_lens_sum, dtype=torch.int32, device="cuda")
    translator.pack_read_stream(
        plan,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        indptr=kv_indptr,
        out=kv_indices,
    )
    if get_parallel().dcp_enabled:
        plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
    wrapper.plan(
        q_indptr,
        kv_indptr,
        kv_indices,
        kv_lens,
        num_local_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        dtype,
        dtype,
    )


# idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py fast_mla_decode_plan / FlashInferMLAAttnBackend._apply_cuda_graph_metadata (host-side arrays)
# expect: SG203
def plan_mla_decode_wrapper_host(
    wrapper,
    seq_lens_cpu: torch.Tensor,
    kv_indices: torch.Tensor,
    head_dims: Tuple[int, int, int],
    sm_scale: float,
    dtype: torch.dtype,
):
    num_local_heads, kv_lora_rank, qk_rope_head_dim = head_dims
    bs = seq_lens_cpu.shape[0]
    qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
    kv_len_arr_cpu = seq_lens_cpu.to(torch.int32)
    kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
    torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
    wrapper.plan(
        qo_indptr_cpu,
        kv_indptr_cpu,
        kv_indices,
        kv_len_arr_cpu,
        num_local_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        dtype,
        dtype,
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (plain decode)
# expect: clean
def fill_decode_graph_lens(metadata, seq_lens: torch.Tensor, bs: int) -> torch.Tensor:
    seq_lens = seq_lens[:bs]
    metadata.global_seq_lens_k.copy_(seq_lens)
    metadata.seq_lens_k.copy_(local_kv_lens(seq_lens))
    return metadata.seq_lens_k


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (plain decode)
# expect: SG203
def fill_decode_graph_lens_swapped(metadata, seq_lens: torch.Tensor, bs: int) -> torch.Tensor:
    seq_lens = seq_lens[:bs]
    metadata.seq_lens_k.copy_(seq_lens)
    metadata.global_seq_lens_k.copy_(local_kv_lens(seq_lens))
    return metadata.seq_lens_k

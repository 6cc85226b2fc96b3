"""Kernel-launch helpers for the MLA decode patches.

The launchers here are thin and generic: they pass through whatever lengths
they are given. The string-keyed table lets a backend pick its kernel by name.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Dict, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def launch_trtllm_mla(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer: "RadixAttention",
    *,
    return_lse: bool = False,
    kernel: str = "trtllm-gen",
):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=return_lse,
        backend=kernel,
    )


def launch_cute_dsl_dcp(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer: "RadixAttention",
    *,
    causal_seqs: torch.Tensor,
    return_lse: bool = True,
):
    parallel = get_parallel()
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=causal_seqs.to(torch.int32),
        return_lse=True,
    )


MLA_DECODE_KERNELS: Dict[str, Callable] = {
    "trtllm-gen": launch_trtllm_mla,
    "cute-dsl": functools.partial(launch_trtllm_mla, kernel="cute-dsl"),
    "cute-dsl-dcp": launch_cute_dsl_dcp,
}


def plan_mla_decode_wrapper(
    wrapper,
    kv_lens: torch.Tensor,
    kv_indices: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    q_data_type: torch.dtype,
    kv_data_type: torch.dtype,
):
    """Plan a BatchMLAPagedAttentionWrapper for a one-token-per-request decode."""
    bs = kv_lens.shape[0]
    kv_lens = kv_lens.to(torch.int32)
    qo_indptr = torch.arange(0, bs + 1, dtype=torch.int32, device=kv_lens.device)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=kv_lens.device)
    kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_lens,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        False,
        sm_scale,
        q_data_type,
        kv_data_type,
    )


class MLAQueryMixin:
    """Query/KV plumbing shared by the TRTLLM-family patches."""

    def _mla_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
        tokens_per_req: int = 1,
    ) -> torch.Tensor:
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
            query = concat_mla_absorb_q_general(q_nope, q_pe)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        bs = forward_batch.batch_size
        return query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)

    def _kv_cache(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _finish_dcp(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        local_lens: torch.Tensor,
        layer: "RadixAttention",
        tokens_per_req: int = 1,
    ):
        bs = local_lens.shape[0]
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        qo_indptr = torch.arange(
            0,
            (bs + 1) * tokens_per_req,
            tokens_per_req,
            dtype=torch.int32,
            device=output.device,
        )
        fixup_zero_kv_rows(output, lse, local_lens, qo_indptr, tokens_per_req)
        return output.flatten(1), lse

"""Common base for the fork's TRT-LLM MLA backend variants.

Factors the query/KV preparation out of ``TRTLLMMLABackend.forward_decode``
and adds two launch hooks that go through :mod:`blindsg18.common.mla_launch`
(so the fork can swap kernels without touching every subclass).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

from blindsg18.common.mla_launch import launch_mla_decode, launch_mla_decode_dcp

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class MLAQueryPrepMixin:
    """Query / paged-KV preparation shared by decode and spec-verify paths."""

    def _prepare_query_and_cache(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
        tokens_per_req: int = 1,
    ):
        if save_kv_cache and k is not None:
            assert k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        query = query.to(self.data_type)
        query = query.view(-1, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _current_decode_metadata(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )


class ForkTRTLLMMLABackend(MLAQueryPrepMixin, TRTLLMMLABackend):
    """TRT-LLM MLA with the fork's launch hooks."""

    def _launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        return_lse: bool = False,
    ):
        return launch_mla_decode(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            backend=self.backend,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )

    def _launch_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: torch.Tensor,
        cp_world: int,
        cp_rank: int,
    ):
        return launch_mla_decode_dcp(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqs=causal_seqs,
        )

    def _finish_rank_local(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        local_seq_lens: torch.Tensor,
        layer: RadixAttention,
        bs: int,
        tokens_per_req: int = 1,
    ):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            local_seq_lens,
            self.q_indptr_decode[: bs + 1] * tokens_per_req,
            tokens_per_req,
        )
        return output.flatten(1), lse


class ForkCuteDslMLABackend(MLAQueryPrepMixin, CuteDslMLABackend):
    """cute-dsl MLA with the shared query prep (DCP-capable kernel)."""

    def _finish_rank_local(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        local_seq_lens: torch.Tensor,
        layer: RadixAttention,
        bs: int,
        tokens_per_req: int = 1,
    ):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            local_seq_lens,
            self.q_indptr_decode[: bs + 1] * tokens_per_req,
            tokens_per_req,
        )
        return output.flatten(1), lse

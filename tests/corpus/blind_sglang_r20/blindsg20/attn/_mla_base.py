"""Shared (unlabelled) plumbing for the fork's trtllm_mla family backends.

The fork only runs bf16 KV on its decode fast paths; fp8 KV and fused-rope
decode always defer to upstream ``TRTLLMMLABackend.forward_decode``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class ForkMLAPlumbingMixin:
    """Query / KV-cache preparation reused by the fork's MLA decode overrides.

    Mixed into subclasses of ``TRTLLMMLABackend``; relies on its attributes
    (``token_to_kv_pool``, ``page_size``, ``forward_decode_metadata`` ...).
    """

    def _fork_takes_fast_path(self, cos_sin_cache, llama_4_scaling) -> bool:
        return (
            self.data_type == torch.bfloat16
            and cos_sin_cache is None
            and llama_4_scaling is None
        )

    def _fork_decode_query(
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
            q_pe = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_pe)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        bs = forward_batch.batch_size
        return query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)

    def _fork_kv_cache(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _fork_decode_metadata(
        self, forward_batch: "ForwardBatch"
    ) -> "TRTLLMMLADecodeMetadata":
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        batch_size = getattr(metadata, "batch_size", None)
        if batch_size is not None and batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _fork_finish_dcp(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        local_seq_lens: torch.Tensor,
        layer: "RadixAttention",
        bs: int,
        tokens_per_req: int = 1,
    ):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        if tokens_per_req == 1:
            q_indptr = self.q_indptr_decode[: bs + 1]
        else:
            q_indptr = self._dense_q_indptr(bs, tokens_per_req)
        fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, tokens_per_req)
        return output.flatten(1), lse

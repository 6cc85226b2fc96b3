"""Ragged target verify (per-request draft widths) on the MLA decode kernel.

Used by the fork's adaptive-width speculation: each request verifies its own
number of draft tokens, packed back to back (``cu_seqlens_q``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


# expect: SG203
def launch_ragged_verify_decode(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    *,
    cu_seqlens_q: torch.Tensor,
    max_q_len: int,
):
    bs = cu_seqlens_q.shape[0] - 1
    if get_parallel().dcp_enabled:
        # Rank-local table and lengths; the merge needs this rank's LSE.
        seq_lens = metadata.seq_lens_k[:bs]
        max_seq_len = metadata.max_seq_len_k
        return_lse = True
    else:
        seq_lens = metadata.seq_lens_k[:bs]
        max_seq_len = metadata.max_seq_len_k + max_q_len
        return_lse = False
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        cum_seq_lens_q=cu_seqlens_q,
        max_q_len=max_q_len,
        return_lse=return_lse,
    )


# expect: clean
def launch_ragged_verify_decode_checked(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    *,
    cu_seqlens_q: torch.Tensor,
    max_q_len: int,
):
    bs = cu_seqlens_q.shape[0] - 1
    dcp_enabled = get_parallel().dcp_enabled
    if dcp_enabled and max_q_len > 1:
        raise NotImplementedError(
            "ragged verify under DCP needs a per-token global causal bound; "
            "the trtllm-gen MLA kernel has none (use cutedsl_mla)"
        )
    seq_lens = metadata.seq_lens_k[:bs]
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=metadata.max_seq_len_k + (0 if dcp_enabled else max_q_len),
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        cum_seq_lens_q=cu_seqlens_q,
        max_q_len=max_q_len,
        return_lse=dcp_enabled,
    )


class RaggedVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """Routes adaptive-width verify through the ragged launcher."""

    checked: bool = True

    def _ragged_verify(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        metadata: TRTLLMMLADecodeMetadata,
        cu_seqlens_q: torch.Tensor,
        max_q_len: int,
    ) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, self.kv_cache_dim).unsqueeze(1)
        launch = (
            launch_ragged_verify_decode_checked
            if self.checked
            else launch_ragged_verify_decode
        )
        return launch(
            self,
            query,
            kv_cache,
            metadata,
            layer,
            cu_seqlens_q=cu_seqlens_q,
            max_q_len=max_q_len,
        )

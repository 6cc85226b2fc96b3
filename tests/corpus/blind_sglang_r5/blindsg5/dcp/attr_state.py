"""Per-step cached KV lengths: converted once in init_forward_metadata instead
of once per MLA layer in the decode."""

from __future__ import annotations

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils import is_flashinfer_available

from ._mla_common import finish_rank_local

if is_flashinfer_available():
    import flashinfer


class CachedLensDcpBackend(TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        # One int32 conversion per step.
        self._step_kv_lens = forward_batch.seq_lens.to(torch.int32)

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        step_lens = self._step_kv_lens[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, step_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )


class CachedLocalLensDcpBackend(TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        # One rank-local int32 view per step (no-op without DCP).
        self._step_kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        step_lens = self._step_kv_lens[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, step_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )

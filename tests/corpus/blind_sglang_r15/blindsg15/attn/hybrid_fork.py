"""Prefill/decode split backend (``--decode-attention-backend cutedsl_mla``)
with the fork's DCP verify handling."""

from __future__ import annotations

import logging

from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

logger = logging.getLogger(__name__)


class ForkHybridWholeLensBackend(HybridAttnBackend):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not (
            forward_batch.forward_mode.is_target_verify()
            and self.spec_attn_is_decode
            and get_parallel().dcp_enabled
        ):
            return
        # Verify on the decode kernel: keep the kernel's view of the verify
        # window consistent with the tree mask, which is built on whole
        # sequence lengths.
        metadata = self.decode_backend.forward_decode_metadata
        metadata.seq_lens_k = metadata.global_seq_lens_k
        forward_batch.decode_trtllm_mla_metadata = metadata


class ForkHybridLocalLensBackend(HybridAttnBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not (
            forward_batch.forward_mode.is_target_verify()
            and self.spec_attn_is_decode
            and get_parallel().dcp_enabled
        ):
            return
        # Re-derive the rank-local view from the global lengths (idempotent);
        # the decode backend's causal bound keeps using the global ones.
        metadata = self.decode_backend.forward_decode_metadata
        metadata.seq_lens_k = self.decode_backend._get_dcp_local_seq_lens(
            metadata.global_seq_lens_k
        )
        forward_batch.decode_trtllm_mla_metadata = metadata


class ForkHybridRefuseVerifyBackend(HybridAttnBackend):
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True, **kwargs):
        if (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
            and not self.spec_attn_is_decode
        ):
            raise NotImplementedError(
                "DCP target verify must run on the decode backend "
                "(--speculative-attention-mode decode)"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, **kwargs
        )

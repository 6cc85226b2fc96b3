"""Shared decode-family metadata builder for the TRTLLM / CuteDSL ports
(unlabelled).  It fills the page table over this rank's slice and the global
lengths; the per-rank ``seq_lens_k`` is left to each backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata

from blindsg35.kernels.lens import draft_extend_kv_lens, verify_kv_lens

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def is_decode_family(forward_batch: "ForwardBatch") -> bool:
    mode = forward_batch.forward_mode
    return (
        mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()
    )


class DcpMetadataMixin:
    def _decode_family_metadata(
        self, forward_batch: "ForwardBatch"
    ) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        mode = forward_batch.forward_mode
        metadata = TRTLLMMLADecodeMetadata()
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
        else:
            max_seq = self.max_context_len

        seq_lens = forward_batch.seq_lens
        if mode.is_target_verify():
            max_seq += self.num_draft_tokens
            seq_lens = verify_kv_lens(seq_lens, self.num_draft_tokens)
        elif mode.is_draft_extend_v2():
            max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            seq_lens = draft_extend_kv_lens(
                seq_lens, forward_batch.extend_seq_lens, max_seq_len_q
            )
            metadata.max_seq_len_q = max_seq_len_q
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )
            metadata.seq_lens_q = forward_batch.extend_seq_lens
        else:
            seq_lens = seq_lens.to(torch.int32)

        metadata.global_seq_lens_k = seq_lens
        # _create_block_kv_indices fills the DCP page table from the rank-local
        # lengths itself (via _get_dcp_local_seq_lens).
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        return metadata

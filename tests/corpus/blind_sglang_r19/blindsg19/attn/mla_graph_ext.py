"""CUDA-graph replay preparation variants for the MLA decode backends under
decode context parallel (DCP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class StaticLensCuteDslMLABackend(CuteDslMLABackend):
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
            local_seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            # cute-dsl masks each draft token against the verify window's
            # global length, so the captured verify reads one length buffer.
            metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens[:bs])
            metadata.seq_lens_k.copy_(local_seq_lens)
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens[:bs])
            metadata.seq_lens_k.copy_(local_seq_lens)

        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class FusedLensCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        parallel = get_parallel()
        global_lens = seq_lens[:bs]
        if forward_mode.is_target_verify():
            global_lens = global_lens + self.num_draft_tokens
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        metadata.global_seq_lens_k.copy_(global_lens)
        metadata.seq_lens_k.copy_(
            get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank)
        )
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class ReplayFastPathTRTLLMMLABackend(TRTLLMMLABackend):
    """Short-circuits the per-replay metadata refresh for plain decode."""

    # expect: SG203
    def init_forward_metadata_out_graph(
        self, forward_batch: "ForwardBatch", in_capture: bool = False
    ):
        forward_mode = forward_batch.forward_mode
        if in_capture or not forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        metadata = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        metadata.seq_lens_k.copy_(seq_lens)
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k.copy_(seq_lens)
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                forward_batch.req_pool_indices[:bs],
                self._get_dcp_local_seq_lens(seq_lens),
            )
            return
        self._apply_cuda_graph_metadata(
            plan=forward_batch.kv_loc_plan,
            bs=bs,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            forward_mode=forward_mode,
        )


class ReplayFastPathFixedTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def init_forward_metadata_out_graph(
        self, forward_batch: "ForwardBatch", in_capture: bool = False
    ):
        forward_mode = forward_batch.forward_mode
        if in_capture or not forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        metadata = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(local_seq_lens)
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                forward_batch.req_pool_indices[:bs],
                local_seq_lens,
            )
            return
        metadata.seq_lens_k.copy_(seq_lens)
        self._apply_cuda_graph_metadata(
            plan=forward_batch.kv_loc_plan,
            bs=bs,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            forward_mode=forward_mode,
        )

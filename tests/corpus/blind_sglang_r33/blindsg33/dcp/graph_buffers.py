"""CUDA-graph replay bodies for TRTLLM / cute-dsl MLA under DCP.

``init_forward_metadata_out_graph`` routes decode, target-verify and
draft-extend replays through ``_apply_cuda_graph_metadata``; these overrides
replace the upstream DCP body with the fork's per-mode versions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

logger = logging.getLogger(__name__)


class DecodeFastPathGraphBackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata — DCP decode replay: capture buffers seq_lens_k / global_seq_lens_k both take seq_lens[:bs]; the page table is filled from _get_dcp_local_seq_lens(seq_lens[:bs]); other modes go to super()
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if not (get_parallel().dcp_enabled and forward_mode.is_decode_or_idle()):
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        lens = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(lens)
        metadata.seq_lens_k.copy_(lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(lens),
        )


class VerifyMirrorGraphBackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (target-verify branch) — DCP verify replay: global_seq_lens_k = seq_lens + num_draft_tokens, seq_lens_k.copy_(global_seq_lens_k), page table from _get_dcp_local_seq_lens(global)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if not (get_parallel().dcp_enabled and forward_mode.is_target_verify()):
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )


class VerifyInPlaceGraphBackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (target-verify branch) — DCP verify replay: global_seq_lens_k = seq_lens + num_draft_tokens, seq_lens_k.copy_(global) then update_local_kv_lens_for_dcp(seq_lens_k) in place, page table from seq_lens_k
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if not (get_parallel().dcp_enabled and forward_mode.is_target_verify()):
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
        update_local_kv_lens_for_dcp(metadata.seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )

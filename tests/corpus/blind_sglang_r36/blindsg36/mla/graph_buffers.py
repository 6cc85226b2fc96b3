"""CUDA-graph replay buffers for the MLA decode-family graphs under DCP.

The captured kernels read seq_lens_k / global_seq_lens_k / block tables
from static buffers; replay prep refreshes them in place every step.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from sglang.srt.distributed.parallel_state import get_dcp_group
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from .lens import MLA_CFG, local_lens_arith


class LabTRTLLMGraphV2(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode,
                                       metadata: TRTLLMMLADecodeMetadata):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            # Same refresh as the non-DCP body; the kernel gets cp_rank.
            metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens[:bs]))
            local_seq_lens = metadata.seq_lens_k
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens[:bs]))
            local_seq_lens = metadata.seq_lens_k
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class LabTRTLLMGraph(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode,
                                       metadata: TRTLLMMLADecodeMetadata):
        p = get_parallel()
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        else:
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        metadata.seq_lens_k.copy_(
            local_lens_arith(metadata.global_seq_lens_k, p.dcp_size, p.dcp_rank)
        )
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (static buffer dict)
# expect: SG203
def refresh_graph_seq_lens(
    buffers: Dict[str, torch.Tensor],
    seq_lens: torch.Tensor,
    bs: int,
    forward_mode: ForwardMode,
    *,
    dcp_size: int,
    dcp_rank: int,
    num_draft_tokens: int = 0,
    fill_tail: Optional[int] = None,
) -> torch.Tensor:
    seq_lens = seq_lens[:bs]
    if forward_mode.is_target_verify():
        glob = seq_lens + num_draft_tokens
        buffers["global_seq_lens_k"][:bs].copy_(glob)
        buffers["seq_lens_k"][:bs].copy_(local_lens_arith(glob, dcp_size, dcp_rank))
    elif forward_mode.is_draft_extend_v2():
        # The window is already inside seq_lens for draft-extend graphs.
        buffers["global_seq_lens_k"][:bs].copy_(seq_lens)
        buffers["seq_lens_k"][:bs].copy_(seq_lens)
    else:
        buffers["global_seq_lens_k"][:bs].copy_(seq_lens)
        buffers["seq_lens_k"][:bs].copy_(local_lens_arith(seq_lens, dcp_size, dcp_rank))
    if fill_tail is not None:
        buffers["seq_lens_k"][bs:].fill_(fill_tail)
    return buffers["seq_lens_k"][:bs]


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (static buffer dict)
# expect: clean
def refresh_graph_seq_lens_v2(
    buffers: Dict[str, torch.Tensor],
    seq_lens: torch.Tensor,
    bs: int,
    forward_mode: ForwardMode,
    *,
    dcp_size: int,
    dcp_rank: int,
    num_draft_tokens: int = 0,
    fill_tail: Optional[int] = None,
) -> torch.Tensor:
    seq_lens = seq_lens[:bs]
    glob = seq_lens + num_draft_tokens if forward_mode.is_target_verify() else seq_lens
    buffers["global_seq_lens_k"][:bs].copy_(glob)
    buffers["seq_lens_k"][:bs].copy_(local_lens_arith(glob, dcp_size, dcp_rank))
    if fill_tail is not None:
        buffers["seq_lens_k"][bs:].fill_(fill_tail)
    return buffers["seq_lens_k"][:bs]


class LabMultiStepGraph(TRTLLMMLAMultiStepDraftBackend):
    """Per-step decode graphs of the multi-step draft backend under DCP."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata_out_graph (per-step buffers)
    # expect: SG203
    def replay_prepare_steps_v2(self, forward_batch: ForwardBatch, bs: int):
        seq_lens = forward_batch.seq_lens
        for i, backend in enumerate(self.attn_backends):
            meta = backend.decode_cuda_graph_metadata[bs]
            step_lens = (seq_lens[:bs] + i).to(torch.int32)
            pairs: List[Tuple[torch.Tensor, torch.Tensor]] = [(meta.seq_lens_k, step_lens)]
            if meta.global_seq_lens_k is not None:
                pairs.append((meta.global_seq_lens_k, step_lens))
            for dst, src in pairs:
                dst.copy_(src)
            if get_parallel().dcp_enabled:
                backend._fill_dcp_block_kv_indices(
                    meta.block_kv_indices,
                    forward_batch.req_pool_indices[:bs],
                    backend._get_dcp_local_seq_lens(step_lens),
                )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata_out_graph (per-step buffers)
    # expect: clean
    def replay_prepare_steps(self, forward_batch: ForwardBatch, bs: int):
        seq_lens = forward_batch.seq_lens
        for i, backend in enumerate(self.attn_backends):
            meta = backend.decode_cuda_graph_metadata[bs]
            step_lens = (seq_lens[:bs] + i).to(torch.int32)
            local = backend._get_dcp_local_seq_lens(step_lens)
            pairs: List[Tuple[torch.Tensor, torch.Tensor]] = [(meta.seq_lens_k, local)]
            if meta.global_seq_lens_k is not None:
                pairs.append((meta.global_seq_lens_k, step_lens))
            for dst, src in pairs:
                dst.copy_(src)
            if get_parallel().dcp_enabled:
                backend._fill_dcp_block_kv_indices(
                    meta.block_kv_indices, forward_batch.req_pool_indices[:bs], local
                )


class LabGraphReplay(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (plain decode)
    # expect: SG203
    def replay_decode_metadata(self, bs: int, req_pool_indices: torch.Tensor,
                               seq_lens: torch.Tensor):
        metadata = self.decode_cuda_graph_metadata[bs]
        p = get_parallel()
        seq_lens = seq_lens[:bs]
        if p.dcp_enabled and not MLA_CFG["kernel_localizes"]:
            local = get_dcp_lens(seq_lens, p.dcp_size, p.dcp_rank)
        else:
            # cp_rank reaches the kernel, which skips non-owned positions.
            local = seq_lens
        metadata.seq_lens_k.copy_(local)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k.copy_(seq_lens)
        if p.dcp_enabled:
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
            )
        self.forward_decode_metadata = metadata


class LabGraphReplayB(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (plain decode)
    # expect: clean
    def replay_decode_metadata(self, bs: int, req_pool_indices: torch.Tensor,
                               seq_lens: torch.Tensor):
        metadata = self.decode_cuda_graph_metadata[bs]
        p = get_parallel()
        seq_lens = seq_lens[:bs]
        if p.dcp_enabled:
            group = get_dcp_group()
            dcp_size, dcp_rank = group.world_size, group.rank_in_group
        else:
            dcp_size, dcp_rank = 1, 0
        local = get_dcp_lens(seq_lens, dcp_size, dcp_rank)
        metadata.seq_lens_k.copy_(local)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k.copy_(seq_lens)
        if dcp_size > 1:
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
            )
        self.forward_decode_metadata = metadata

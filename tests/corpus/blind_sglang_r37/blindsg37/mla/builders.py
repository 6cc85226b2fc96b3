"""Decode-family metadata builders for the MLA backends.

Upstream builds target-verify / draft-extend / decode metadata inline in
``TRTLLMMLABackend.init_forward_metadata``; the fork moves it into builder
classes that hold the backend (for its page-table helpers) and the DCP
settings as fields, so TRTLLM MLA and CuteDSL MLA share one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import triton

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(lens: torch.Tensor) -> torch.Tensor:
    """This rank's interleaved share of each length (identity without DCP)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return lens
    return get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)


def rank_local_max(max_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_len
    local = max_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_len % parallel.dcp_size
    )
    return max(local, 1)


@dataclass
class DcpLens:
    """Per-request KV lengths as the DCP kernels consume them."""

    local: torch.Tensor
    global_: torch.Tensor

    @classmethod
    def from_global(cls, lens: torch.Tensor) -> "DcpLens":
        lens = lens.to(torch.int32)
        return cls(local=rank_local_lens(lens), global_=lens)


def verify_kv_lens(forward_batch: ForwardBatch, num_draft_tokens: int) -> torch.Tensor:
    """Whole KV length of each verify row (prefix + the draft window)."""
    return (forward_batch.seq_lens + num_draft_tokens).to(torch.int32)


def decode_lens_from_metadata(
    metadata: TRTLLMMLADecodeMetadata, forward_batch: ForwardBatch
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(local, global) lens for a decode launch, preferring the hoisted copies."""
    bs = forward_batch.batch_size
    if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
        return metadata.seq_lens_k[:bs], metadata.global_seq_lens_k[:bs]
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    return rank_local_lens(global_lens), global_lens


def fill_dcp_page_table(
    req_to_token: torch.Tensor,
    block_kv_indices: torch.Tensor,
    req_pool_indices: torch.Tensor,
    local_seq_lens: torch.Tensor,
    page_size: int,
    v2p: Optional[torch.Tensor] = None,
) -> None:
    parallel = get_parallel()
    create_mla_kv_page_table_for_dcp[
        (
            block_kv_indices.shape[0],
            get_num_kv_index_blocks_flashmla(block_kv_indices.shape[1], page_size),
        )
    ](
        req_to_token,
        req_pool_indices,
        local_seq_lens,
        block_kv_indices,
        v2p,
        req_to_token.stride(0),
        block_kv_indices.stride(0),
        PHYSICAL_PAGE_SIZE=page_size,
        DCP_SIZE=parallel.dcp_size,
        DCP_RANK=parallel.dcp_rank,
        PAGES_PER_BLOCK=get_num_page_per_block_flashmla(page_size),
        HAS_V2P=v2p is not None,
    )


class DecodeFamilyMetadataBuilder:
    """decode / target-verify / draft-extend metadata (cutedsl_mla, 0.5.18 port)."""

    def __init__(self, backend, num_draft_tokens: int):
        self.backend = backend
        self.num_draft_tokens = num_draft_tokens
        self.dcp_enabled = get_parallel().dcp_enabled

    def _common(self, forward_batch: ForwardBatch, seq_lens: torch.Tensor, max_seq: int):
        metadata = TRTLLMMLADecodeMetadata()
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self.backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            forward_batch.batch_size,
            self.backend._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = int(max_seq)
        metadata.batch_size = forward_batch.batch_size
        return metadata

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.init_forward_metadata (0.5.18)
    # expect: SG203
    def build(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        mode = forward_batch.forward_mode
        max_seq = self.backend.max_context_len
        seq_lens = forward_batch.seq_lens
        if mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
            max_seq += self.num_draft_tokens
        elif mode.is_draft_extend_v2():
            max_q = max(forward_batch.extend_seq_lens_cpu)
            seq_lens = seq_lens - forward_batch.extend_seq_lens + max_q
        metadata = self._common(forward_batch, seq_lens, max_seq)
        if mode.is_draft_extend_v2():
            metadata.max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.seq_lens_q = forward_batch.extend_seq_lens
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )

        if self.dcp_enabled:
            if mode.is_target_verify() or mode.is_decode_or_idle():
                metadata.global_seq_lens_k = metadata.seq_lens_k
                metadata.seq_lens_k = rank_local_lens(metadata.global_seq_lens_k)
            else:
                metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.max_seq_len_k = rank_local_max(metadata.max_seq_len_k)
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: clean
    def build_v2(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        mode = forward_batch.forward_mode
        max_seq = self.backend.max_context_len
        seq_lens = forward_batch.seq_lens
        if mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
            max_seq += self.num_draft_tokens
        elif mode.is_draft_extend_v2():
            max_q = max(forward_batch.extend_seq_lens_cpu)
            seq_lens = seq_lens - forward_batch.extend_seq_lens + max_q
        metadata = self._common(forward_batch, seq_lens, max_seq)
        if mode.is_draft_extend_v2():
            metadata.max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.seq_lens_q = forward_batch.extend_seq_lens
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )

        if self.dcp_enabled:
            if (
                mode.is_target_verify()
                or mode.is_decode_or_idle()
                or mode.is_draft_extend_v2()
            ):
                metadata.global_seq_lens_k = metadata.seq_lens_k
                metadata.seq_lens_k = rank_local_lens(metadata.global_seq_lens_k)
            metadata.max_seq_len_k = rank_local_max(metadata.max_seq_len_k)
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata


class DraftExtendMetadataBuilder:
    """DRAFT_EXTEND_V2 metadata for the trtllm-family decode kernels."""

    def __init__(self, backend):
        self.backend = backend
        self.parallel = get_parallel()

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft_extend_v2 branch)
    # expect: SG203
    def build(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        seq_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        metadata = TRTLLMMLADecodeMetadata(
            max_seq_len_q=max_seq_len_q,
            sum_seq_lens_q=sum(forward_batch.extend_seq_lens_cpu),
            seq_lens_q=forward_batch.extend_seq_lens,
            cu_seqlens_q=torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            ),
            seq_lens_k=seq_lens.to(torch.int32),
        )
        max_seq = self.backend.max_context_len
        metadata.block_kv_indices = self.backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self.backend._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = max_seq
        if self.parallel.dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.max_seq_len_k = self.backend._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        return metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft_extend_v2 branch)
    # expect: clean
    def build_hoisted(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        seq_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        metadata = TRTLLMMLADecodeMetadata(
            max_seq_len_q=max_seq_len_q,
            sum_seq_lens_q=sum(forward_batch.extend_seq_lens_cpu),
            seq_lens_q=forward_batch.extend_seq_lens,
            cu_seqlens_q=torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            ),
            seq_lens_k=seq_lens.to(torch.int32),
        )
        max_seq = self.backend.max_context_len
        metadata.block_kv_indices = self.backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self.backend._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = max_seq
        if self.parallel.dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self.backend._get_dcp_local_seq_lens(seq_lens)
            metadata.max_seq_len_k = self.backend._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        return metadata

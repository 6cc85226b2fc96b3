"""Page-table builders for MLA decode under DCP (static KV pool, no v2p).

Two layouts show up in the fleet: the CUDA one, where every token is
round-robined over the DCP ranks and the per-rank page table comes from
``create_mla_kv_page_table_for_dcp``; and the Ascend-style one, where whole
pages are interleaved (``interleave_size == page_size``) and the table is a
strided view of ``req_to_token``.
"""

from __future__ import annotations

import torch

from sglang.kernels.ops.attention.kv_indices import (
    create_flashmla_kv_indices_triton,
    get_num_kv_index_blocks_flashmla,
)
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class PagedDecodeTRTLLMMLABackend(TRTLLMMLABackend):
    """Builds the block table inline for batches that skipped
    init_forward_metadata (PD-transferred decode batches)."""

    def _flashmla_table(self, forward_batch: ForwardBatch, seq_lens: torch.Tensor):
        bs = forward_batch.batch_size
        max_blocks = self._calc_padded_blocks(self.max_context_len)
        table = torch.full(
            (bs, max_blocks), -1, dtype=torch.int32, device=seq_lens.device
        )
        create_flashmla_kv_indices_triton[
            (bs, get_num_kv_index_blocks_flashmla(max_blocks, self.page_size))
        ](
            self.req_to_token,
            forward_batch.req_pool_indices,
            seq_lens,
            None,
            table,
            self.req_to_token.stride(0),
            max_blocks,
            PAGED_SIZE=self.page_size,
        )
        return table

    # expect: SG203
    def decode_paged(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        block_tables = self._flashmla_table(forward_batch, seq_lens)
        kv_cache = paged_row_view(
            self.token_to_kv_pool.get_key_buffer(layer.layer_id), self.page_size
        ).unsqueeze(1)
        if get_parallel().dcp_enabled:
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=local_seq_lens,
                max_seq_len=self._get_dcp_local_max_seq_len(self.max_context_len),
                layer=layer,
                return_lse=True,
            )
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=self.max_context_len,
            layer=layer,
        )


class InlineTableTRTLLMMLABackend(PagedDecodeTRTLLMMLABackend):
    # expect: clean
    def decode_paged(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        kv_cache = paged_row_view(
            self.token_to_kv_pool.get_key_buffer(layer.layer_id), self.page_size
        ).unsqueeze(1)
        if get_parallel().dcp_enabled:
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
            block_tables = torch.full(
                (forward_batch.batch_size, self._calc_padded_blocks(self.max_context_len)),
                -1,
                dtype=torch.int32,
                device=seq_lens.device,
            )
            self._fill_dcp_block_kv_indices(
                block_tables, forward_batch.req_pool_indices, local_seq_lens
            )
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=local_seq_lens,
                max_seq_len=self._get_dcp_local_max_seq_len(self.max_context_len),
                layer=layer,
                return_lse=True,
            )
        block_tables = self._flashmla_table(forward_batch, seq_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=self.max_context_len,
            layer=layer,
        )


class ReplayDCPTRTLLMMLABackend(TRTLLMMLABackend):
    """Graph replay prep: one copy per step instead of two."""

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
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        # The kernel reads seq_lens_k; keep it pointing at the fresh values.
        metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )


class GraphPrepTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        metadata.seq_lens_k.copy_(
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        )
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


def _mla_decode(backend, query, kv_cache, block_tables, seq_lens, max_seq_len, layer):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=True,
    )


# expect: SG203
def page_interleaved_decode(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """Decode for page-interleaved DCP pools (interleave_size == page_size)."""
    parallel = get_parallel()
    page_size = backend.page_size
    kv_lens = forward_batch.seq_lens[: forward_batch.batch_size]
    local_kv_lens = get_dcp_lens(
        kv_lens, parallel.attn_dcp_size, parallel.attn_dcp_rank, interleave_size=page_size
    ).int()
    max_len = int(forward_batch.seq_lens_cpu.max().item())
    block_tables = (
        backend.req_to_token[forward_batch.req_pool_indices, :max_len:page_size]
        // page_size
    ).to(torch.int32)
    kv_cache = paged_row_view(
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id), page_size
    ).unsqueeze(1)
    return _mla_decode(
        backend, query, kv_cache, block_tables, local_kv_lens,
        int(local_kv_lens.max().item()), layer,
    )


# expect: clean
def page_interleaved_decode_npu(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    parallel = get_parallel()
    page_size = backend.page_size
    kv_lens = forward_batch.seq_lens[: forward_batch.batch_size]
    local_kv_lens = get_dcp_lens(
        kv_lens, parallel.attn_dcp_size, parallel.attn_dcp_rank, interleave_size=page_size
    ).int()
    page_stride = page_size * parallel.attn_dcp_size
    max_len = int(forward_batch.seq_lens_cpu.max().item())
    block_tables = (
        backend.req_to_token[forward_batch.req_pool_indices, :max_len:page_stride]
        // page_stride
    ).to(torch.int32)
    kv_cache = paged_row_view(
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id), page_size
    ).unsqueeze(1)
    return _mla_decode(
        backend, query, kv_cache, block_tables, local_kv_lens,
        int(local_kv_lens.max().item()), layer,
    )


# expect: SG203
def page_interleaved_decode_cpu_lens(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """Variant driven by the host mirror so no D2H sync is needed."""
    parallel = get_parallel()
    page_size = backend.page_size
    kv_lens_cpu = forward_batch.seq_lens_cpu[: forward_batch.batch_size].int()
    page_stride = page_size * parallel.attn_dcp_size
    max_len = int(kv_lens_cpu.max().item())
    block_tables = (
        backend.req_to_token[forward_batch.req_pool_indices, :max_len:page_stride]
        // page_stride
    ).to(torch.int32)
    kv_cache = paged_row_view(
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id), page_size
    ).unsqueeze(1)
    return _mla_decode(
        backend,
        query,
        kv_cache,
        block_tables,
        kv_lens_cpu.to(query.device, non_blocking=True),
        max_len,
        layer,
    )

# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""trtllm-gen MLA decode paths for decode context parallelism.

The trtllm-gen kernel has no in-kernel DCP support: a rank runs it over its own
cyclic slice (rank-local page table + lengths) and returns the LSE the model
merges across the DCP group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)

_ENABLE_PDL = is_arch_support_pdl()


class DcpAwareTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with a rank-local DCP decode."""

    def _lse_merge_ready(self, raw_out, lse, local_seq_lens, bs, layer):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._lse_merge_ready(raw_out, lse, local_seq_lens, bs, layer)

    # expect: SG203
    def forward_decode_eager_lens(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if get_parallel().dcp_enabled:
            max_seq_len = self._get_dcp_local_max_seq_len(
                int(forward_batch.seq_lens_cpu.max().item())
            )
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=max_seq_len,
                layer=layer,
                return_lse=True,
            )
            return self._lse_merge_ready(raw_out, lse, seq_lens, bs, layer)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def forward_decode_prepared(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        if get_parallel().dcp_enabled:
            return self._forward_decode_dcp(
                query, kv_cache, metadata, layer, forward_batch
            )
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=(
                metadata.seq_lens_k
                if metadata.seq_lens_k is not None
                else forward_batch.seq_lens
            ),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def forward_target_verify_direct(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        dcp_enabled = get_parallel().dcp_enabled
        max_seq_len = metadata.max_seq_len_k + (0 if dcp_enabled else draft_token_num)
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            enable_pdl=_ENABLE_PDL,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_enabled,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        if dcp_enabled:
            raw_out, lse = out
            lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
            return raw_out.reshape(bs * draft_token_num, -1), lse
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def forward_target_verify_hooked(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        dcp_enabled = get_parallel().dcp_enabled
        max_seq_len = metadata.max_seq_len_k + (0 if dcp_enabled else draft_token_num)
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=dcp_enabled,
        )
        if dcp_enabled:
            raw_out, lse = out
            lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
            return raw_out.reshape(bs * draft_token_num, -1), lse
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def forward_target_verify_trtllm(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm_mla target verify is not supported with DCP; "
                "use --attention-backend cutedsl_mla"
            )
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            enable_pdl=_ENABLE_PDL,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class TRTLLMMLAReplayBackend(TRTLLMMLABackend):
    """Refreshes graph metadata and launches in one call (piecewise decode)."""

    # expect: SG203
    def replay_and_decode_sharded(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        parallel = get_parallel()
        if parallel.dcp_enabled:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
            )
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return raw_out.flatten(1), lse
        metadata.seq_lens_k.copy_(seq_lens[:bs])
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.flatten(1)

    # expect: clean
    def replay_and_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        parallel = get_parallel()
        if parallel.dcp_enabled:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens[:bs]))
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
            )
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return raw_out.flatten(1), lse
        metadata.seq_lens_k.copy_(seq_lens[:bs])
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.flatten(1)

    # expect: SG203
    def decode_with_host_snapshot(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        seq_lens_cpu = forward_batch.seq_lens_cpu[:bs]
        max_seq = int(seq_lens_cpu.max().item())
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            query.device,
        )
        kernel_lens = seq_lens_cpu.to(query.device, dtype=torch.int32, non_blocking=True)
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_kv_indices,
                seq_lens=kernel_lens,
                max_seq_len=max_seq,
                layer=layer,
            )
            return raw_out, None
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def decode_with_host_lens(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        seq_lens_cpu = forward_batch.seq_lens_cpu[:bs]
        max_seq = int(seq_lens_cpu.max().item())
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            query.device,
        )
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_kv_indices,
                seq_lens=seq_lens_cpu.to(query.device, dtype=torch.int32),
                max_seq_len=max_seq,
                layer=layer,
            )
            return raw_out, None
        local_lens_cpu = get_dcp_lens(seq_lens_cpu, parallel.dcp_size, parallel.dcp_rank)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_kv_indices,
            seq_lens=local_lens_cpu.to(query.device, dtype=torch.int32, non_blocking=True),
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def verify_as_chain_rows(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        """Run each verify token as its own single-token query row."""
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q_rows = q.to(self.data_type).view(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        total_kv_lens = metadata.global_seq_lens_k[:bs]
        row_lens = get_dcp_chain_spec_lens(
            total_kv_lens, ndt, parallel.dcp_size, parallel.dcp_rank
        )
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        raw_out, lse = self._run_decode_kernel(
            query=q_rows,
            kv_cache=kv_cache,
            block_tables=row_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, row_lens, self.q_indptr_decode[: bs * ndt + 1], 1
        )
        return output.flatten(1), lse

    # expect: SG203
    def verify_as_token_rows(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        """Run each verify token as its own single-token query row."""
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q_rows = q.to(self.data_type).view(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        steps = torch.arange(1, ndt + 1, device=q.device, dtype=torch.int32)
        row_lens = (
            forward_batch.seq_lens[:bs].to(torch.int32).unsqueeze(1) + steps
        ).reshape(-1)
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        raw_out, lse = self._run_decode_kernel(
            query=q_rows,
            kv_cache=kv_cache,
            block_tables=row_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return raw_out.view(bs * ndt, -1), lse

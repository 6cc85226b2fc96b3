"""TRTLLM MLA under decode context parallelism: the platform team's fork.

Subclasses override single hooks of ``TRTLLMMLABackend`` so the fork can be
rebased onto upstream with minimal conflicts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

logger = logging.getLogger(__name__)


class FreshLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Reads lengths off the batch in the DCP decode instead of the hoisted
    per-step metadata (the hoisted buffer is shared across graph tiers)."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp — override: kernel seq_lens and the zero-KV fixup lens are forward_batch.seq_lens[:bs] cast to int32
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class RecomputedLensTRTLLMMLABackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp — override: kernel seq_lens recomputed per call with _get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse


class GraphTierTRTLLMMLABackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata — override: verify branch fills global_seq_lens_k then seq_lens_k via _get_dcp_local_seq_lens; the decode/draft-extend branch copies seq_lens[:bs] into both capture buffers; page table filled from metadata.seq_lens_k
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
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        else:
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(seq_lens[:bs])
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class ModeTableTRTLLMMLABackend(TRTLLMMLABackend):
    def _global_lens_for(self, forward_mode: ForwardMode, seq_lens: torch.Tensor):
        if forward_mode.is_target_verify():
            return seq_lens + self.num_draft_tokens
        return seq_lens

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata — override: global lens picked per mode by _global_lens_for, every mode copies _get_dcp_local_seq_lens(global) into seq_lens_k before the page-table fill
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        metadata.global_seq_lens_k.copy_(self._global_lens_for(forward_mode, seq_lens[:bs]))
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(metadata.global_seq_lens_k))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class EagerTableTRTLLMMLABackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._create_block_kv_indices — override of the DCP branch: page table from _fill_dcp_block_kv_indices fed seq_lens.to(int32)
    # expect: SG203
    def _create_block_kv_indices(
        self,
        plan: "KVLocPlan",
        batch_size: int,
        max_blocks: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        device: torch.device,
    ) -> torch.Tensor:
        if not get_parallel().dcp_enabled:
            return super()._create_block_kv_indices(
                plan, batch_size, max_blocks, req_pool_indices, seq_lens, device
            )
        block_kv_indices = torch.full(
            (batch_size, max_blocks), -1, dtype=torch.int32, device=device
        )
        self._fill_dcp_block_kv_indices(
            block_kv_indices, req_pool_indices, seq_lens.to(torch.int32)
        )
        return block_kv_indices


class ReusedTableTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._table_scratch: Optional[torch.Tensor] = None

    def _scratch(self, batch_size: int, max_blocks: int, device) -> torch.Tensor:
        buf = self._table_scratch
        if buf is None or buf.shape[0] < batch_size or buf.shape[1] < max_blocks:
            buf = torch.full((batch_size, max_blocks), -1, dtype=torch.int32, device=device)
            self._table_scratch = buf
        return buf[:batch_size, :max_blocks]

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._create_block_kv_indices — override of the DCP branch: reused scratch table filled by _fill_dcp_block_kv_indices from _get_dcp_local_seq_lens(seq_lens)
    # expect: clean
    def _create_block_kv_indices(
        self,
        plan: "KVLocPlan",
        batch_size: int,
        max_blocks: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        device: torch.device,
    ) -> torch.Tensor:
        if not get_parallel().dcp_enabled:
            return super()._create_block_kv_indices(
                plan, batch_size, max_blocks, req_pool_indices, seq_lens, device
            )
        block_kv_indices = self._scratch(batch_size, max_blocks, device)
        block_kv_indices.fill_(-1)
        self._fill_dcp_block_kv_indices(
            block_kv_indices, req_pool_indices, self._get_dcp_local_seq_lens(seq_lens)
        )
        return block_kv_indices


class SpecBenchTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm-gen kernel call without the upstream q_len / LSE gate, used to
    benchmark DCP speculative runs on the trtllm-gen kernel."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel — override that calls flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla directly with seq_lens and return_lse; causal_seqs/cp_world/cp_rank are accepted and not forwarded
    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        extra_kwargs = {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = self._multi_ctas_kv_counter_buffer
        else:
            extra_kwargs["backend"] = self.backend
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            **extra_kwargs,
        )


class GatedTRTLLMMLABackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel — override that raises NotImplementedError under DCP when q_len > 1 or causal_seqs is passed, then defers to super()
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError(
                f"trtllm-gen MLA has no global causal bound (q_len={q_len}); "
                "use cutedsl_mla for DCP speculative decoding"
            )
        return super()._run_decode_kernel(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            causal_seqs=causal_seqs,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )


class HostLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Uses the host mirror for the decode lens to avoid a device cast."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata — override: after super(), decode/idle batches get metadata.seq_lens_k rebuilt from forward_batch.seq_lens_cpu[:bs] (non_blocking H2D)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None or forward_batch.seq_lens_cpu is None:
            return
        bs = forward_batch.batch_size
        metadata.seq_lens_k = forward_batch.seq_lens_cpu[:bs].to(
            self.device, dtype=torch.int32, non_blocking=True
        )

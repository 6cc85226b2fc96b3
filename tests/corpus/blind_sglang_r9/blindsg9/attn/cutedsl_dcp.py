"""cutedsl_mla (flashinfer cute-dsl MLA decode) variants of the fork, for
speculative decoding under decode context parallelism."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg9.common.dcp_lens import as_kernel_lens, local_max_len, rank_local_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class NoBoundCuteDslMLABackend(CuteDslMLABackend):
    """Lets single-token DCP decode through without the global bound."""

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
        parallel = get_parallel()
        if not parallel.dcp_enabled:
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
        extra = {}
        if causal_seqs is not None:
            extra["causal_seqlens_kv_global"] = as_kernel_lens(causal_seqs)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=as_kernel_lens(seq_lens),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
            **extra,
        )
        return raw_out, lse


class RefusingCuteDslMLABackend(CuteDslMLABackend):
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
        parallel = get_parallel()
        if not parallel.dcp_enabled:
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
        if causal_seqs is None:
            raise ValueError(
                "DCP cute-dsl MLA decode needs the global per-request KV "
                "lengths (causal_seqs)"
            )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=as_kernel_lens(seq_lens),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=as_kernel_lens(causal_seqs),
            return_lse=True,
        )
        return raw_out, lse


class _DraftExtendViewMixin:
    def _draft_extend_q(self, q, layer, forward_batch):
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        q = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return q.to(self.data_type), kv_cache, bs, tokens_per_req


class DraftExtendCuteDslMLABackend(_DraftExtendViewMixin, CuteDslMLABackend):
    """Draft extend under DCP with the cute-dsl kernel (uniform window)."""

    # expect: SG203
    def forward_draft_extend_dcp(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        q, kv_cache, bs, tokens_per_req = self._draft_extend_q(q, layer, forward_batch)
        local_lens = rank_local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.flatten(0, 1).flatten(1), lse.flatten(0, 1)

    # expect: clean
    def forward_draft_extend_dcp_bounded(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        q, kv_cache, bs, tokens_per_req = self._draft_extend_q(q, layer, forward_batch)
        global_lens = as_kernel_lens(forward_batch.seq_lens[:bs])
        local_lens = rank_local_lens(global_lens)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
        return raw_out.flatten(0, 1).flatten(1), lse.flatten(0, 1)

    # expect: clean
    def forward_draft_extend_via_hook(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        """Route through the backend hook; CuteDslMLABackend._run_decode_kernel
        refuses a DCP launch that carries no global bound."""
        parallel = get_parallel()
        q, kv_cache, bs, tokens_per_req = self._draft_extend_q(q, layer, forward_batch)
        return self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]),
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )


class TryLocalCuteDslMLABackend(CuteDslMLABackend):
    # expect: SG203
    def _dcp_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = as_kernel_lens(forward_batch.seq_lens[:bs])
        try:
            local_lens = self._get_dcp_local_seq_lens(global_lens)
        except RuntimeError:
            # get_dcp_lens trips on a host-resident lens tensor during warmup.
            logger.warning_once("DCP local lens unavailable; using batch lengths")
            local_lens = global_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        fixup_zero_kv_rows(
            raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            lse.view(-1, layer.tp_q_head_num),
            local_lens,
            self.q_indptr_decode[: bs + 1],
            1,
        )
        return raw_out, lse


class TryLocalStrictCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def _dcp_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = as_kernel_lens(forward_batch.seq_lens[:bs])
        try:
            local_lens = self._get_dcp_local_seq_lens(global_lens)
        except RuntimeError as e:
            raise NotImplementedError(
                "DCP decode needs rank-local KV lengths; refusing to fall back "
                "to the batch lengths"
            ) from e
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        fixup_zero_kv_rows(
            raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            lse.view(-1, layer.tp_q_head_num),
            local_lens,
            self.q_indptr_decode[: bs + 1],
            1,
        )
        return raw_out, lse


def _hoisted_lens_enabled() -> bool:
    return os.environ.get("SGLANG_FORK_DCP_HOISTED_LENS", "1") == "1"


class EnvGatedCuteDslMLABackend(CuteDslMLABackend):
    # expect: SG203
    def _dcp_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if _hoisted_lens_enabled() and metadata.global_seq_lens_k is not None:
            global_lens = metadata.global_seq_lens_k[:bs]
            kernel_lens = metadata.seq_lens_k[:bs]
        else:
            global_lens = forward_batch.seq_lens[:bs]
            kernel_lens = global_lens
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=local_max_len(int(forward_batch.seq_lens_cpu.max())),
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )


class EnvGatedLocalCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def _dcp_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if _hoisted_lens_enabled() and metadata.global_seq_lens_k is not None:
            global_lens = metadata.global_seq_lens_k[:bs]
            kernel_lens = metadata.seq_lens_k[:bs]
        else:
            global_lens = forward_batch.seq_lens[:bs]
            kernel_lens = rank_local_lens(global_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=local_max_len(int(forward_batch.seq_lens_cpu.max())),
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

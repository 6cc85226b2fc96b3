"""cute-dsl MLA variants: DCP target-verify and draft-extend entry points.

The cute-dsl decode kernel takes this rank's lengths in ``seq_lens`` and the
per-request global lengths in ``causal_seqlens_kv_global``
(``CuteDslMLABackend._run_decode_kernel(..., causal_seqs=...)``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg43.common.dcp_lens import chain_row_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class ForkCuteDslMLABackend(CuteDslMLABackend):
    def _kv_cache_view(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # expect: SG203
    def verify_dcp_planned(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_target_verify()
        parallel = get_parallel()
        assert parallel.dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        return output.flatten(1), lse.view(bs * draft_token_num, layer.tp_q_head_num)

    # expect: clean
    def verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_target_verify()
        parallel = get_parallel()
        assert parallel.dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        return output.flatten(1), lse.view(bs * draft_token_num, layer.tp_q_head_num)

    # expect: SG203
    def draft_extend_dcp_dense(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        assert forward_batch.forward_mode.is_draft_extend_v2()
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        if not parallel.dcp_enabled:
            raise NotImplementedError("draft extend here is the DCP path only")
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=self._kv_cache_view(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def draft_extend_dcp_chain(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        """Draft extend as single-token rows, one causal frontier per row."""
        assert forward_batch.forward_mode.is_draft_extend_v2()
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise NotImplementedError("draft extend here is the DCP path only")
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        row_local, row_global = chain_row_lens(
            metadata.global_seq_lens_k[:bs], tokens_per_seq
        )
        rows = bs * tokens_per_seq
        q_rows = q.view(rows, 1, layer.tp_q_head_num, layer.head_dim)
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(
            tokens_per_seq, dim=0
        )
        raw_out, lse = self._run_decode_kernel(
            query=q_rows,
            kv_cache=self._kv_cache_view(layer),
            block_tables=row_tables,
            seq_lens=row_local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=row_global,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out, lse


class FallbackCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl with a trtllm-gen fallback for inputs cute-dsl rejects."""

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
        try:
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
        except (ValueError, NotImplementedError) as exc:
            logger.warning_once("cute-dsl MLA decode rejected input (%s); using trtllm-gen", exc)
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
            backend="trtllm-gen",
            return_lse=return_lse,
        )


class PreflightCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl with an argument preflight before the kernel hook."""

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
        if get_parallel().dcp_enabled and (cp_world <= 1 or causal_seqs is None):
            if q_len > 1 or not return_lse:
                raise NotImplementedError(
                    f"DCP MLA decode with q_len={q_len} needs the global causal "
                    "bound and cp_world/cp_rank"
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


class HoistedCuteDslMLABackend(CuteDslMLABackend):
    """Keeps both length views on the decode metadata after planning."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        metadata = self.forward_decode_metadata
        if (
            get_parallel().dcp_enabled
            and metadata is not None
            and metadata.seq_lens_k is not None
            and (mode.is_decode_or_idle() or mode.is_target_verify())
        ):
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )


class LazyHoistCuteDslMLABackend(CuteDslMLABackend):
    """Same hoist, applied lazily."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        metadata = self.forward_decode_metadata
        if (
            get_parallel().dcp_enabled
            and metadata is not None
            and metadata.seq_lens_k is not None
            and metadata.global_seq_lens_k is None
            and (mode.is_decode_or_idle() or mode.is_target_verify())
        ):
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )

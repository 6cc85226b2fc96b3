"""trtllm_mla backend variants of the fork (DCP decode)."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg9.common.dcp_lens import as_kernel_lens, rank_local_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


def _finish_dcp(backend, raw_out, lse, local_seq_lens, layer, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(
        output, lse, local_seq_lens, backend.q_indptr_decode[: bs + 1], 1
    )
    return output.flatten(1), lse


class GlobalLensTRTLLMMLABackend(TRTLLMMLABackend):
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
        if metadata.seq_lens_k is not None:
            kernel_lens = metadata.seq_lens_k[:bs]
        else:
            # Metadata from the legacy planner carries no hoisted lengths.
            kernel_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if (
            get_parallel().dcp_enabled
            and forward_batch.forward_mode.is_decode_or_idle()
            and metadata is not None
            and metadata.global_seq_lens_k is not None
        ):
            # Keep the scheduler's view in the hoisted int32 buffer so the
            # zero-KV fixup sees the same lengths as the sampler.
            metadata.seq_lens_k = metadata.global_seq_lens_k
        forward_batch.decode_trtllm_mla_metadata = metadata

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
            local_seq_lens = metadata.seq_lens_k
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            # One copy instead of two: the page table below is built from the
            # rank-local view anyway.
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )


class LocalLensTRTLLMMLABackend(TRTLLMMLABackend):
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
        if metadata.seq_lens_k is not None:
            kernel_lens = metadata.seq_lens_k[:bs]
        else:
            kernel_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if (
            get_parallel().dcp_enabled
            and forward_batch.forward_mode.is_decode_or_idle()
            and metadata is not None
            and metadata.global_seq_lens_k is not None
        ):
            # Re-derive the rank-local view from the global lengths.
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
        forward_batch.decode_trtllm_mla_metadata = metadata

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
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class StoredLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches the step's kernel lengths on the backend at plan time."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kernel_lens = forward_batch.seq_lens.to(torch.int32)

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
        kernel_lens = self._step_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)


class StoredLocalLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Same cache, filled with this rank's share."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kernel_lens = rank_local_lens(forward_batch.seq_lens)

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
        kernel_lens = self._step_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)


class PropertyLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def _decode_kernel_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        if md is None:
            return None
        return md.global_seq_lens_k if md.global_seq_lens_k is not None else md.seq_lens_k

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
        kernel_lens = self._decode_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)


class PropertyLocalLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def _decode_kernel_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        if md is None:
            return None
        if md.global_seq_lens_k is not None:
            return self._get_dcp_local_seq_lens(md.global_seq_lens_k)
        return md.seq_lens_k

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
        kernel_lens = self._decode_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kernel_lens, layer, bs)


class ReplaceMetaTRTLLMMLABackend(TRTLLMMLABackend):
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
        # Slice a private copy so the graph-static buffers stay untouched.
        step_md = dataclasses.replace(
            metadata,
            seq_lens_k=metadata.global_seq_lens_k[:bs],
            block_kv_indices=metadata.block_kv_indices[:bs],
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=step_md.block_kv_indices,
            seq_lens=step_md.seq_lens_k,
            max_seq_len=step_md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, step_md.seq_lens_k, layer, bs)


class ReplaceMetaLocalTRTLLMMLABackend(TRTLLMMLABackend):
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
        step_md = dataclasses.replace(
            metadata,
            seq_lens_k=self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs]),
            block_kv_indices=metadata.block_kv_indices[:bs],
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=step_md.block_kv_indices,
            seq_lens=step_md.seq_lens_k,
            max_seq_len=step_md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, step_md.seq_lens_k, layer, bs)


class _FastDecodeMixin:
    def _prepare_query(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope_reshaped = q_rope.view(
            -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
        )
        query = concat_mla_absorb_q_general(q_nope, q_rope_reshaped).unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache


class EarlyReturnTRTLLMMLABackend(_FastDecodeMixin, TRTLLMMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if self.data_type == torch.float8_e4m3fn or q_rope is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None or metadata.seq_lens_k is None:
            # Unplanned step (e.g. right after a DP idle round): decode over
            # the batch's own lengths with a freshly built table.
            query, kv_cache = self._prepare_query(
                q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
            )
            bs = forward_batch.batch_size
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
            block_tables = self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            )
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=forward_batch.seq_lens,
                max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
                layer=layer,
                return_lse=get_parallel().dcp_enabled,
            )
            if isinstance(out, tuple):
                return out[0].view(-1, layer.tp_q_head_num * layer.v_head_dim), out[1]
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return super().forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class EarlyReturnLocalTRTLLMMLABackend(_FastDecodeMixin, TRTLLMMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if self.data_type == torch.float8_e4m3fn or q_rope is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None or metadata.seq_lens_k is None:
            query, kv_cache = self._prepare_query(
                q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
            )
            bs = forward_batch.batch_size
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
            block_tables = self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            )
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=self._get_dcp_local_seq_lens(forward_batch.seq_lens),
                max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
                layer=layer,
                return_lse=get_parallel().dcp_enabled,
            )
            if isinstance(out, tuple):
                return out[0].view(-1, layer.tp_q_head_num * layer.v_head_dim), out[1]
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return super().forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class StepLensTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Each draft step i attends over i more tokens than the batch's lengths."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        dcp = get_parallel().dcp_enabled
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            backend.init_forward_metadata(forward_batch)
            md = backend.forward_decode_metadata
            step_global = (forward_batch.seq_lens + i).to(torch.int32)
            if dcp:
                md.global_seq_lens_k = step_global
            md.seq_lens_k = step_global


class StepLocalLensTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        parallel = get_parallel()
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            backend.init_forward_metadata(forward_batch)
            md = backend.forward_decode_metadata
            step_global = (forward_batch.seq_lens + i).to(torch.int32)
            if parallel.dcp_enabled:
                md.global_seq_lens_k = step_global
                md.seq_lens_k = get_dcp_lens(
                    step_global, parallel.dcp_size, parallel.dcp_rank
                ).to(torch.int32)
            else:
                md.seq_lens_k = step_global


class _VerifyViewMixin:
    def _verify_q(self, q, layer, forward_batch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return q.to(self.data_type), kv_cache, bs, draft_token_num


class VerifyHookTRTLLMMLABackend(_VerifyViewMixin, TRTLLMMLABackend):
    # expect: clean
    def forward_target_verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        """Goes through the backend hook, which refuses a DCP launch with more
        than one query token per request (no global causal bound here)."""
        metadata = forward_batch.decode_trtllm_mla_metadata
        q, kv_cache, bs, draft_token_num = self._verify_q(q, layer, forward_batch)
        return self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )


class VerifyPartialTRTLLMMLABackend(_VerifyViewMixin, TRTLLMMLABackend):
    # expect: SG203
    def forward_target_verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        from blindsg9.attn.kernels import make_cute_dsl_dcp_launcher

        metadata = forward_batch.decode_trtllm_mla_metadata
        q, kv_cache, bs, draft_token_num = self._verify_q(q, layer, forward_batch)
        if not get_parallel().dcp_enabled:
            return self._run_decode_kernel(
                query=q,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
        launcher = make_cute_dsl_dcp_launcher(self)
        return launcher(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_local_lens(as_kernel_lens(forward_batch.seq_lens + draft_token_num)),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )

"""TRT-LLM MLA backend variants carried by the fork.

Each class is a small patch on top of upstream ``TRTLLMMLABackend``; they are
selected per deployment through ``blindsg14.attn.registry``.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class _ForkTRTLLMMLABase(TRTLLMMLABackend):
    """Shared query/KV preparation for the fork's decode overrides."""

    def _decode_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_pe = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_pe)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        planned_bs = getattr(metadata, "batch_size", None)
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _neutralize_empty_rows(self, output, lse, local_seq_lens, bs, q_len=1):
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], q_len
        )
        return output.flatten(1), lse


# --------------------------------------------------------------------------
# metadata producers
# --------------------------------------------------------------------------
class Int32LensTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Keeps an int32 copy of the decode lens on the metadata (fused RoPE)."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        # One cast per step instead of one per layer in forward_decode.
        metadata.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.batch_size = forward_batch.batch_size
        forward_batch.decode_trtllm_mla_metadata = metadata


class HoistedLensTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Same hoisting, but keeps the rank-local / global split DCP needs."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        metadata = self.forward_decode_metadata
        global_lens = forward_batch.seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = global_lens
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(global_lens)
        metadata.batch_size = forward_batch.batch_size
        forward_batch.decode_trtllm_mla_metadata = metadata


class GraphDecodeTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Cheaper DCP replay prep for plain decode graphs."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        lens = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(lens)
        # The page-table fill below is what restricts reads to this rank.
        metadata.seq_lens_k.copy_(lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(lens),
        )


class ClampedGraphTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        super()._apply_dcp_cuda_graph_metadata(
            bs, req_pool_indices, seq_lens, forward_mode, metadata
        )
        # Padded graph rows carry fill value 1; keep them non-negative after
        # the local split so the zero-KV fixup sees them as empty.
        metadata.seq_lens_k[:bs].clamp_(min=0)


# --------------------------------------------------------------------------
# rank-local decode launches
# --------------------------------------------------------------------------
class BatchLensDcpTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
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
        return self._neutralize_empty_rows(output, lse, seq_lens, bs)


class HoistedGlobalDcpTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # Prefer the hoisted int32 lens when the metadata builder kept them.
        if metadata.global_seq_lens_k is not None:
            kv_lens = metadata.global_seq_lens_k[:bs]
        else:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), kv_lens, bs
        )


class LocalLensDcpTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), local_seq_lens, bs
        )


class DryRunSafeDcpTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        try:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        except (RuntimeError, TypeError):
            # Meta-device dry runs (memory profiling) cannot evaluate the
            # interleave math; the lengths are irrelevant there.
            local_seq_lens = forward_batch.seq_lens[:bs]
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
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), local_seq_lens, bs
        )


class MetadataFirstDcpTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        try:
            local_seq_lens = metadata.seq_lens_k[:bs]
        except TypeError:
            # seq_lens_k is None on metadata built by an older planner.
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
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), local_seq_lens, bs
        )


class _ActiveBatchLensMixin:
    """Exposes the lens of the batch currently being decoded."""

    _active_batch: Optional[ForwardBatch] = None

    @property
    def _decode_kv_lens(self) -> torch.Tensor:
        fb = self._active_batch
        return fb.seq_lens[: fb.batch_size]

    @property
    def _decode_local_kv_lens(self) -> torch.Tensor:
        return self._get_dcp_local_seq_lens(self._decode_kv_lens)


class ActiveBatchDcpTRTLLMMLABackend(_ActiveBatchLensMixin, _ForkTRTLLMMLABase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        self._active_batch = forward_batch
        kv_lens = self._decode_kv_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), kv_lens, forward_batch.batch_size
        )


class ActiveBatchLocalDcpTRTLLMMLABackend(_ActiveBatchLensMixin, _ForkTRTLLMMLABase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        self._active_batch = forward_batch
        kv_lens = self._decode_local_kv_lens
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        return self._neutralize_empty_rows(
            output, lse.view(-1, layer.tp_q_head_num), kv_lens, forward_batch.batch_size
        )


# --------------------------------------------------------------------------
# full forward_decode overrides
# --------------------------------------------------------------------------
class NoDcpFastPathTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        raw_out = self._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class SingleRankFastPathTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if get_parallel().attn_dcp_size > 1 or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        ).view(-1, layer.tp_q_head_num * layer.v_head_dim)


class AttentionSinkTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Adds per-head attention sinks (GPT-OSS style) to MLA decode."""

    sinks_by_layer: dict = {}

    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        sinks = self.sinks_by_layer.get(layer.layer_id)
        if sinks is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            sinks=[sinks],
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# --------------------------------------------------------------------------
# multi-token (target verify / draft extend) under DCP
# --------------------------------------------------------------------------
class DcpVerifyTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Runs DCP target verify on trtllm-gen instead of refusing it."""

    # expect: SG203
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class RefusingDcpVerifyTRTLLMMLABackend(_ForkTRTLLMMLABase):
    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            raise NotImplementedError(
                "trtllm-gen MLA has no global causal bound; DCP speculative "
                "decoding needs --attention-backend cutedsl_mla"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class HookedDraftExtendTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Draft extend through the backend's kernel hook (which guards DCP)."""

    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = query.shape[0] // bs
        query = query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        # _run_decode_kernel refuses q_len > 1 under DCP on trtllm-gen.
        raw_out, lse = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class PermissiveHookTRTLLMMLABackend(_ForkTRTLLMMLABase):
    """Drops upstream's DCP refusal so MTP verify runs on Hopper."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if get_parallel().dcp_enabled and causal_seqs is not None:
            logger.warning_once(
                "trtllm-gen ignores the DCP causal bound; verify tokens share "
                "the last token's rank-local window"
            )
        extra_kwargs = {"backend": self.backend} if self.backend != "trtllm-gen" else {}
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra_kwargs,
        )

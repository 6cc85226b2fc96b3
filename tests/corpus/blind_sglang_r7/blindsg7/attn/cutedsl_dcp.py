"""cute-dsl MLA decode variants with decode context parallelism."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Dict, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg7.attn._query import prepare_mla_query_and_cache

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


def _metadata(backend, forward_batch: ForwardBatch):
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


def _finish(backend, raw_out, lse, local_lens, layer, q_indptr, q_len):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_lens, q_indptr, q_len)
    return output.flatten(1), lse


class BoundKernelCuteDslMLABackend(CuteDslMLABackend):
    """Pre-binds the constant cute-dsl kernel arguments once per backend."""

    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self._dcp_decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_dcp=True,
            return_lse=True,
        )

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1 or causal_seqs is None:
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
        causal_i32 = causal_seqs.to(torch.int32)
        return self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=causal_i32,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_i32,
        )


class BoundKernelLocalCuteDslMLABackend(BoundKernelCuteDslMLABackend):
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1 or causal_seqs is None:
            return CuteDslMLABackend._run_decode_kernel(
                self,
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
        return self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32),
        )


class EagerCuteDslMLABackend(CuteDslMLABackend):
    """Decode without the hoisted metadata (eager-only deployments)."""

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = global_seq_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self, raw_out, lse, local_seq_lens, layer, self.q_indptr_decode[: bs + 1], 1
        )


class EagerLocalCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self, raw_out, lse, local_seq_lens, layer, self.q_indptr_decode[: bs + 1], 1
        )


class VerifyCuteDslMLABackend(CuteDslMLABackend):
    """Routes DCP target verify straight to the cute-dsl kernel."""

    def _verify_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        return query, kv_cache, bs, draft_token_num

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, bs, draft_token_num = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self,
            raw_out,
            lse,
            metadata.seq_lens_k,
            layer,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )


class VerifyBoundedCuteDslMLABackend(VerifyCuteDslMLABackend):
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return CuteDslMLABackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, bs, draft_token_num = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            return_lse=True,
        )
        return _finish(
            self,
            raw_out,
            lse,
            metadata.seq_lens_k,
            layer,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )


class LensCacheCuteDslMLABackend(CuteDslMLABackend):
    """Caches the per-batch-size rank-local lengths built at plan time."""

    _local_lens_by_bs: Dict[int, torch.Tensor] = {}

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._local_lens_by_bs = {
                forward_batch.batch_size: self._get_dcp_local_seq_lens(
                    forward_batch.seq_lens
                )
            }

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        try:
            local_seq_lens = self._local_lens_by_bs[bs]
        except KeyError:
            local_seq_lens = global_seq_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self, raw_out, lse, local_seq_lens, layer, self.q_indptr_decode[: bs + 1], 1
        )


class LensCacheLocalCuteDslMLABackend(LensCacheCuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return CuteDslMLABackend.forward_decode(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        try:
            local_seq_lens = self._local_lens_by_bs[bs]
        except KeyError:
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self, raw_out, lse, local_seq_lens, layer, self.q_indptr_decode[: bs + 1], 1
        )


class DraftExtendCuteDslMLABackend(CuteDslMLABackend):
    """Lets the cute-dsl kernel run the DCP draft extend with its causal bound."""

    def _draft_extend_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query, kv_cache = prepare_mla_query_and_cache(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        query = query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim)
        return query, kv_cache, bs, max_q

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, bs, max_q = self._draft_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        kv_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_q
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self, raw_out, lse, kv_lens, layer, self._dense_q_indptr(bs, max_q), max_q
        )


class DraftExtendLocalCuteDslMLABackend(DraftExtendCuteDslMLABackend):
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled
        ):
            return CuteDslMLABackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, bs, max_q = self._draft_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _metadata(self, forward_batch)
        global_kv_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_q
        local_kv_lens = self._get_dcp_local_seq_lens(global_kv_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
            causal_seqs=global_kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            self,
            raw_out,
            lse,
            local_kv_lens,
            layer,
            self._dense_q_indptr(bs, max_q),
            max_q,
        )

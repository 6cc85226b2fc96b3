"""cute-dsl MLA backend variants (the only MLA decode kernel with native DCP)."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class _ForkCuteDslBase(CuteDslMLABackend):
    def _prep(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            query = concat_mla_absorb_q_general(
                q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
            )
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        kv_cache = paged_row_view(
            self.token_to_kv_pool.get_key_buffer(layer.layer_id), self.page_size
        ).unsqueeze(1)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        return query, kv_cache, metadata


class BatchLensCuteDslMLABackend(_ForkCuteDslBase):
    """Skips the hoisted metadata lens (they lag one step under overlap)."""

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
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata = self._prep(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        batch_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=batch_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=batch_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, batch_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class GlobalKernelLensCuteDslMLABackend(_ForkCuteDslBase):
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
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("DCP MLA decode needs the global per-request lengths")
        global_lens = causal_seqs.to(torch.int32)
        # The monolithic kernel derives each rank's slice from the global
        # length and cp_rank itself, so hand it the global length twice.
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=global_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )


class Fp16SoftmaxCuteDslMLABackend(_ForkCuteDslBase):
    # expect: clean
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
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("DCP MLA decode needs the global per-request lengths")
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
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32),
            use_fp16_softmax=True,
            return_lse=True,
        )


class DcpVerifyCuteDslMLABackend(_ForkCuteDslBase):
    """Target verify under DCP with the per-token global causal bound."""

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
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata = self._prep(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k, self._dense_q_indptr(bs, ndt), ndt
        )
        return output.flatten(1), lse


class DcpDraftExtendCuteDslMLABackend(_ForkCuteDslBase):
    """Draft extend under DCP (uniform window, dense query)."""

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
        if not (
            forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata = self._prep(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        window = query.shape[0] // bs
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, window, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + window,
            layer=layer,
            # The kernel needs *a* per-request bound; the rank-local frontier
            # is what this rank can see anyway.
            causal_seqs=local_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class DcpDraftExtendGlobalBoundCuteDslMLABackend(_ForkCuteDslBase):
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
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata = self._prep(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        window = query.shape[0] // bs
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, window, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k + window,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

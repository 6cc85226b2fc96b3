"""cute-dsl MLA backends with the fork's DCP target-verify support."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _write_kv_and_build_q(backend, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
    if save_kv_cache:
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    if q_rope is not None:
        q = concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        )
    q = q.view(-1, layer.tp_q_head_num, layer.head_dim).to(backend.data_type)
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
    return q, kv_cache


class VerifyCuteDslMLABackend(CuteDslMLABackend):
    """Routes DCP target-verify straight to the cute-dsl DCP kernel."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled
        ) or self.data_type == torch.float8_e4m3fn:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        q, kv_cache = _write_kv_and_build_q(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        kv_lens = metadata.global_seq_lens_k
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num), draft_token_num,
        )
        return output.flatten(1), lse


class VerifyLocalCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled
        ) or self.data_type == torch.float8_e4m3fn:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        q, kv_cache = _write_kv_and_build_q(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_lens = metadata.global_seq_lens_k
        kv_lens = metadata.seq_lens_k
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, kv_lens,
            self._dense_q_indptr(bs, draft_token_num), draft_token_num,
        )
        return output.flatten(1), lse


class _StepLensMixin:
    """Convenience views over the step's TRTLLM decode metadata."""

    @property
    def step_kv_lens(self) -> torch.Tensor:
        md = self.forward_decode_metadata
        if md.global_seq_lens_k is not None:
            return md.global_seq_lens_k
        return md.seq_lens_k

    @property
    def step_local_kv_lens(self) -> torch.Tensor:
        md = self.forward_decode_metadata
        if md.global_seq_lens_k is not None:
            return md.seq_lens_k
        return self._get_dcp_local_seq_lens(md.seq_lens_k)

    @property
    def step_causal_bound(self) -> torch.Tensor:
        md = self.forward_decode_metadata
        return md.global_seq_lens_k if md.global_seq_lens_k is not None else md.seq_lens_k


class PropertyLensCuteDslMLABackend(_StepLensMixin, CuteDslMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
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
        query, kv_cache = _write_kv_and_build_q(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1)
        bs = forward_batch.batch_size
        kv_lens = self.step_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=self.forward_decode_metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=self.forward_decode_metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=self.step_causal_bound[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, self.step_local_kv_lens[:bs],
                           self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class PropertyLocalLensCuteDslMLABackend(_StepLensMixin, CuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
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
        query, kv_cache = _write_kv_and_build_q(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1)
        bs = forward_batch.batch_size
        kv_lens = self.step_local_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=self.forward_decode_metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=self.forward_decode_metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=self.step_causal_bound[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

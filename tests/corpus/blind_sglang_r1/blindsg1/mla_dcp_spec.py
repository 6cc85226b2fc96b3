"""Speculative (multi-token query) MLA attention under DCP.

Target verify and draft extend give every request ``q_len > 1`` query rows.
On a DCP rank each row may only see the global prefix up to its own position;
the rank-local lengths alone do not say where that boundary falls inside the
interleaved slice.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg1._dcp_utils import causal_row_bounds, dcp_world, per_row, per_step

if is_flashinfer_available():
    import flashinfer


def _verify_metadata(backend, forward_batch) -> TRTLLMMLADecodeMetadata:
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


def _kv_cache(backend, layer):
    return paged_row_view(
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id), backend.page_size
    ).unsqueeze(1)


class CuteDslVerifyBackend(CuteDslMLABackend):
    """cute-dsl target verify with the DCP kernel path (upstream only wires
    decode)."""

    # expect: SG203
    def forward_verify_dcp(
        self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = _verify_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=_kv_cache(self, layer),
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


class CuteDslTargetVerifyBackend(CuteDslMLABackend):
    # expect: clean
    def forward_verify_dcp(
        self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch
    ):
        parallel = get_parallel()
        metadata = _verify_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=_kv_cache(self, layer),
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
            causal_seqlens_kv_global=metadata.global_seq_lens_k.to(torch.int32),
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


class TrtllmGenVerifyMLABackend(TRTLLMMLABackend):
    """Drops the upstream refusal so DCP runs can keep trtllm-gen for verify;
    the rank-local page table and lengths are already prepared by the parent
    metadata path."""

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
        extra_kwargs = {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
            )
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
            return_lse=return_lse or cp_world > 1,
            **extra_kwargs,
        )


class VerifyKernelTRTLLMMLABackend(TRTLLMMLABackend):
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
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (
            q_len > 1 or causal_seqs is not None or not return_lse
        ):
            raise NotImplementedError(
                "trtllm-gen MLA has no global causal bound input; DCP with "
                "q_len > 1 needs cutedsl_mla"
            )
        extra_kwargs = {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
            )
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


def _row_kernel(backend, rows_q, kv_cache, rows_tables, rows_lens, layer):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=rows_q,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=rows_tables,
        seq_lens=rows_lens.to(torch.int32),
        max_seq_len=backend._get_dcp_local_max_seq_len(backend.max_context_len),
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=True,
    )


# expect: SG203
def draft_extend_dcp_by_rows(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """Draft extend under DCP as a q_len == 1 decode over (request, row) pairs,
    which trtllm-gen accepts without the cute-dsl DCP path."""
    metadata = _verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    q_len = q.shape[0] // bs
    rows_q = q.view(bs * q_len, 1, layer.tp_q_head_num, layer.head_dim)
    local_lens = backend._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
    rows_tables = per_row(metadata.block_kv_indices[:bs], q_len)
    rows_lens = per_row(local_lens, q_len)
    raw_out, lse = _row_kernel(
        backend, rows_q, _kv_cache(backend, layer), rows_tables, rows_lens, layer
    )
    return raw_out.view(bs * q_len, -1), lse.view(bs * q_len, -1)


# expect: clean
def draft_extend_dcp_rowwise(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    metadata = _verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    q_len = q.shape[0] // bs
    dcp_size, dcp_rank = dcp_world()
    rows_q = q.view(bs * q_len, 1, layer.tp_q_head_num, layer.head_dim)
    rows_tables = per_row(metadata.block_kv_indices[:bs], q_len)
    # Request-major local frontier of each query row (its global causal
    # prefix, restricted to this rank's slice).
    rows_lens = get_dcp_chain_spec_lens(
        forward_batch.seq_lens[:bs], q_len, dcp_size, dcp_rank
    )
    raw_out, lse = _row_kernel(
        backend, rows_q, _kv_cache(backend, layer), rows_tables, rows_lens, layer
    )
    return raw_out.view(bs * q_len, -1), lse.view(bs * q_len, -1)


# expect: SG203
def verify_dcp_by_rows_step_major(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """Target verify by rows; step-major so each launch wave shares a step."""
    metadata = _verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    q_len = forward_batch.spec_info.draft_token_num
    dcp_size, dcp_rank = dcp_world()
    rows_q = (
        q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        .transpose(0, 1)
        .reshape(q_len * bs, 1, layer.tp_q_head_num, layer.head_dim)
    )
    rows_tables = per_step(metadata.block_kv_indices[:bs], q_len)
    rows_lens = get_dcp_chain_spec_lens(
        forward_batch.seq_lens[:bs] + q_len, q_len, dcp_size, dcp_rank
    )
    raw_out, lse = _row_kernel(
        backend, rows_q, _kv_cache(backend, layer), rows_tables, rows_lens, layer
    )
    out = raw_out.view(q_len, bs, -1).transpose(0, 1).reshape(bs * q_len, -1)
    return out, lse.view(q_len, bs, -1).transpose(0, 1).reshape(bs * q_len, -1)


# expect: clean
def verify_dcp_rowwise(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    metadata = _verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    q_len = forward_batch.spec_info.draft_token_num
    dcp_size, dcp_rank = dcp_world()
    rows_q = q.view(bs * q_len, 1, layer.tp_q_head_num, layer.head_dim)
    total_kv = forward_batch.seq_lens[:bs] + q_len
    global_bounds = causal_row_bounds(total_kv, q_len)
    rows_lens = get_dcp_lens(global_bounds, dcp_size, dcp_rank)
    rows_tables = per_row(metadata.block_kv_indices[:bs], q_len)
    raw_out, lse = _row_kernel(
        backend, rows_q, _kv_cache(backend, layer), rows_tables, rows_lens, layer
    )
    return raw_out.view(bs * q_len, -1), lse.view(bs * q_len, -1)


# expect: SG203
def verify_dcp_rows_flat(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    metadata = _verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    q_len = forward_batch.spec_info.draft_token_num
    rows_q = q.view(bs * q_len, 1, layer.tp_q_head_num, layer.head_dim)
    total_kv = forward_batch.seq_lens[:bs] + q_len
    rows_lens = causal_row_bounds(total_kv, q_len)
    rows_tables = per_row(metadata.block_kv_indices[:bs], q_len)
    raw_out, lse = _row_kernel(
        backend, rows_q, _kv_cache(backend, layer), rows_tables, rows_lens, layer
    )
    return raw_out.view(bs * q_len, -1), lse.view(bs * q_len, -1)


class SpecGuardTRTLLMMLABackend(TRTLLMMLABackend):
    """Spec paths (verify / draft extend) in one place, with the DCP guard."""

    def _spec_query(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q = torch.cat(
                [
                    q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                    q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
                ],
                dim=-1,
            )
        return q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)

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
        mode = forward_batch.forward_mode
        if not (mode.is_target_verify() or mode.is_draft_extend_v2()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        dcp = get_parallel().dcp_enabled
        if dcp and mode.is_target_verify():
            raise NotImplementedError(
                "DCP target verify needs the global causal bound; use cutedsl_mla"
            )
        q = self._spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache)
        metadata = _verify_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        if dcp:
            out, lse = raw_out
            return out.reshape(bs * tokens_per_seq, -1), lse
        return raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)


class SpecPathTRTLLMMLABackend(SpecGuardTRTLLMMLABackend):
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
        mode = forward_batch.forward_mode
        if not (mode.is_target_verify() or mode.is_draft_extend_v2()):
            return TRTLLMMLABackend.forward_extend(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        dcp = get_parallel().dcp_enabled
        q = self._spec_query(q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        if dcp and tokens_per_seq > 1:
            raise NotImplementedError(
                "DCP with a multi-token query (verify / draft extend) needs the "
                "global causal bound; use cutedsl_mla"
            )
        metadata = _verify_metadata(self, forward_batch)
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        if dcp:
            out, lse = raw_out
            return out.reshape(bs * tokens_per_seq, -1), lse
        return raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)


class CausalCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl decode reading the lengths straight from the batch (our PD
    decode batches carry no hoisted metadata lens)."""

    def _decode_inputs(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        query = torch.cat(
            [
                q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
            ],
            dim=-1,
        ).unsqueeze(1)
        metadata = _verify_metadata(self, forward_batch)
        return query, _kv_cache(self, layer), metadata

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
        query, kv_cache, metadata = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.flatten(1), lse


class PDDecodeCuteDslMLABackend(CausalCuteDslMLABackend):
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
        query, kv_cache, metadata = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
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
        return raw_out.flatten(1), lse

# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""cute-dsl MLA backends with DCP support for speculative decoding.

Extends :class:`CuteDslMLABackend` with target-verify and draft-extend forwards
that run through the monolithic cute-dsl decode kernel, and a decode forward
that reads the lengths hoisted by metadata init / graph replay.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class _CuteDslQueryMixin:
    """bf16 query / KV preparation shared by the forwards below."""

    def _prepare_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query.to(self.data_type), kv_cache

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        batch_size = getattr(metadata, "batch_size", None)
        if batch_size is not None and batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata


class ShardedCuteDslMLABackend(_CuteDslQueryMixin, CuteDslMLABackend):
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
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )

        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        local_seq_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        global_seq_lens = (
            metadata.global_seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # expect: SG203
    def forward_target_verify(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

        global_seq_lens = metadata.global_seq_lens_k[:bs]
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

    # expect: SG203
    def forward_draft_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = query.shape[0]
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
            (1, 0),
        )
        padded_q = torch.zeros(
            (bs, max_seq_len_q, layer.tp_q_head_num, layer.head_dim),
            dtype=query.dtype,
            device=query.device,
        )
        query = self.pad_draft_extend_query(
            query, padded_q, forward_batch.extend_seq_lens, cu_seqlens_q
        )
        if get_parallel().dcp_enabled:
            seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
        else:
            seq_lens = metadata.seq_lens_k[:bs]
        max_seq_len = metadata.max_seq_len_k + max_seq_len_q

        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
        )
        output = self.unpad_draft_extend_output(
            raw_out, cu_seqlens_q, forward_batch.extend_seq_lens, total_tokens
        )
        return output.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def _decode_from_graph_metadata(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = self.decode_cuda_graph_metadata[bs]
        local_seq_lens = metadata.seq_lens_k[:bs]
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.flatten(1), lse


class CuteDslVerifyBackend(_CuteDslQueryMixin, CuteDslMLABackend):
    # expect: clean
    def forward_target_verify(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

        raw_out, lse = self._run_decode_kernel(
            query=query,
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

    # expect: clean
    def forward_draft_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = query.shape[0]
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
            (1, 0),
        )
        padded_q = torch.zeros(
            (bs, max_seq_len_q, layer.tp_q_head_num, layer.head_dim),
            dtype=query.dtype,
            device=query.device,
        )
        query = self.pad_draft_extend_query(
            query, padded_q, forward_batch.extend_seq_lens, cu_seqlens_q
        )
        global_seq_lens = (
            forward_batch.seq_lens[:bs]
            - forward_batch.extend_seq_lens
            + max_seq_len_q
        ).to(torch.int32)
        if parallel.dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=self._get_dcp_local_seq_lens(global_seq_lens),
                max_seq_len=self._get_dcp_local_max_seq_len(
                    metadata.max_seq_len_k + max_seq_len_q
                ),
                layer=layer,
                causal_seqs=global_seq_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            output = self.unpad_draft_extend_output(
                raw_out, cu_seqlens_q, forward_batch.extend_seq_lens, total_tokens
            )
            return output.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k + max_seq_len_q,
            layer=layer,
        )
        output = self.unpad_draft_extend_output(
            raw_out, cu_seqlens_q, forward_batch.extend_seq_lens, total_tokens
        )
        return output.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def _decode_from_graph_metadata(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = self.decode_cuda_graph_metadata[bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return raw_out.flatten(1), lse


class CuteDslDecodeOnlyBackend(_CuteDslQueryMixin, CuteDslMLABackend):
    # expect: clean
    def forward_draft_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "cutedsl draft extend under DCP is not supported by this backend; "
                "disable --enable-dcp or the draft-extend forward"
            )
        query, kv_cache = self._prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        query = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def forward_decode_fallback(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is None:
            seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=seq_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

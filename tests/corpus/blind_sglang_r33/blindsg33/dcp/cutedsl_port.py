"""cute-dsl MLA under DCP: draft-extend and verify paths for the spec fork.

Upstream ``CuteDslMLABackend`` serves DCP plain decode; the fork adds the
multi-token speculative paths on the same kernel (``enable_dcp=True``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class _SpecDcpCuteDslBase(CuteDslMLABackend):
    """Shared query/KV preparation for the fork's multi-token DCP paths."""

    def _prepare(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q = concat_mla_absorb_q_general(
                q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
            )
        q = q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        return q, kv_cache, metadata

    def _merge_ready(self, raw_out, lse, local_lens, bs, q_len, layer):
        output = raw_out.view(bs * q_len, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * q_len, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_lens, self._dense_q_indptr(bs, q_len), q_len)
        return output.flatten(1), lse

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
        if get_parallel().dcp_enabled and mode.is_draft_extend_v2():
            return self._draft_extend_dcp(
                q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
            )
        if get_parallel().dcp_enabled and mode.is_target_verify():
            return self._verify_dcp(
                q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )

    def _draft_extend_dcp(self, *args):
        raise NotImplementedError

    def _verify_dcp(self, *args):
        raise NotImplementedError


class RankBoundDraftExtendBackend(_SpecDcpCuteDslBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP branch) extended to DRAFT_EXTEND_V2 — dense [bs, num_draft_tokens] query; seq_lens and causal_seqs both read from metadata.seq_lens_k
    # expect: SG203
    def _draft_extend_dcp(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        q, kv_cache, metadata = self._prepare(
            q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
        )
        bs = forward_batch.batch_size
        window = self.num_draft_tokens
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=q.view(bs, window, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=local_lens,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_lens, bs, window, layer)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify DCP branch) — dense [bs, draft_token_num] query; seq_lens=metadata.seq_lens_k, causal_seqs=metadata.global_seq_lens_k
    # expect: clean
    def _verify_dcp(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        q, kv_cache, metadata = self._prepare(
            q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        raw_out, lse = self._run_decode_kernel(
            query=q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, metadata.seq_lens_k[:bs], bs, draft_token_num, layer
        )


class GlobalBoundDraftExtendBackend(_SpecDcpCuteDslBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP branch) extended to DRAFT_EXTEND_V2 — dense [bs, num_draft_tokens] query; seq_lens=metadata.seq_lens_k, causal_seqs=metadata.global_seq_lens_k
    # expect: clean
    def _draft_extend_dcp(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        q, kv_cache, metadata = self._prepare(
            q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
        )
        bs = forward_batch.batch_size
        window = self.num_draft_tokens
        local_lens = metadata.seq_lens_k[:bs]
        global_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=q.view(bs, window, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_lens, bs, window, layer)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify DCP branch) — dense [bs, draft_token_num] query; seq_lens and causal_seqs both read from metadata.global_seq_lens_k
    # expect: SG203
    def _verify_dcp(self, q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache):
        q, kv_cache, metadata = self._prepare(
            q, k, k_rope, q_rope, layer, forward_batch, save_kv_cache
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, kv_lens, bs, draft_token_num, layer)

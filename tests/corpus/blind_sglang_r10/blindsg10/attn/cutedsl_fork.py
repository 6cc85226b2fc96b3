"""cutedsl_mla variants: fused-layer decode / verify / draft-extend entries.

``CuteDslMLABackend._run_decode_kernel`` takes rank-local ``seq_lens`` and the
global per-request lengths as ``causal_seqs`` when ``cp_world > 1``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg10.attn.kernels import as_dense_query, decode_metadata, kv_cache_view

if is_flashinfer_available():
    import flashinfer


def _finish(layer, raw_out, lse, local_seq_lens, q_indptr, q_len):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, q_len)
    return output.flatten(1), lse


class ForkCuteDslMLABackend(CuteDslMLABackend):
    def _plain_decode(self, query, layer, forward_batch):
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None

    # expect: SG203
    def decode_dcp(self, query, layer, forward_batch):
        parallel = get_parallel()
        query = as_dense_query(query)
        if not parallel.dcp_enabled:
            return self._plain_decode(query, layer, forward_batch)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            layer, raw_out, lse, global_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )

    # expect: clean
    def decode_dcp_rank_local(self, query, layer, forward_batch):
        parallel = get_parallel()
        query = as_dense_query(query)
        if not parallel.dcp_enabled:
            # DCP off: the whole sequence lives on this rank.
            return self._plain_decode(query, layer, forward_batch)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
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
            layer, raw_out, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )

    def _verify_query(self, q, layer, forward_batch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        return q, bs, draft_token_num

    # expect: clean
    def target_verify_dcp(self, q, layer, forward_batch):
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        q, bs, draft_token_num = self._verify_query(q, layer, forward_batch)
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=q,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            layer,
            raw_out,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )

    # expect: SG203
    def target_verify_stable_lens(self, q, layer, forward_batch):
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        q, bs, draft_token_num = self._verify_query(q, layer, forward_batch)
        if not parallel.dcp_enabled:
            raw_out = self._run_decode_kernel(
                query=q,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        # seq_lens_k is re-derived per step by graph replay-prep while the draft
        # graph can still be reading it; the global buffer is stable for the step.
        kv_lens = metadata.global_seq_lens_k
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(
            layer,
            raw_out,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )

    def _padded_draft_extend_query(self, q, layer, metadata, bs):
        padded_q = q.new_zeros(
            (bs, metadata.max_seq_len_q, layer.tp_q_head_num, layer.head_dim)
        )
        return self.pad_draft_extend_query(
            q.view(-1, layer.tp_q_head_num, layer.head_dim),
            padded_q,
            metadata.seq_lens_q,
            metadata.cu_seqlens_q,
        )

    # expect: SG203
    def draft_extend_dcp(self, q, layer, forward_batch):
        """Draft extend with ragged accept lengths."""
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        q_dense = self._padded_draft_extend_query(
            q.to(self.data_type), layer, metadata, bs
        )
        max_seq_len = metadata.max_seq_len_k + metadata.max_seq_len_q
        if parallel.dcp_enabled:
            # The cute-dsl DCP kernel wants a uniform q_len; the ragged draft
            # extend runs trtllm-gen over this rank's page table instead.
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q_dense,
                kv_cache=kv_cache_view(self, layer),
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=max_seq_len,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
        else:
            raw_out = self._run_decode_kernel(
                query=q_dense,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=max_seq_len,
                layer=layer,
            )
            lse = None
        output = self.unpad_draft_extend_output(
            raw_out, metadata.cu_seqlens_q, metadata.seq_lens_q, metadata.sum_seq_lens_q
        )
        return output.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # expect: clean
    def draft_extend_dcp_bounded(self, q, layer, forward_batch):
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        q_dense = self._padded_draft_extend_query(
            q.to(self.data_type), layer, metadata, bs
        )
        max_seq_len = metadata.max_seq_len_k + metadata.max_seq_len_q
        if parallel.dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=q_dense,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=max_seq_len,
                layer=layer,
                causal_seqs=metadata.global_seq_lens_k,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        else:
            raw_out = self._run_decode_kernel(
                query=q_dense,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=max_seq_len,
                layer=layer,
            )
            lse = None
        output = self.unpad_draft_extend_output(
            raw_out, metadata.cu_seqlens_q, metadata.seq_lens_q, metadata.sum_seq_lens_q
        )
        return output.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class LensFnCuteDslMLABackend(CuteDslMLABackend):
    """Normalizes kernel lengths through one stored callable (no per-layer branching)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_lens = lambda s: s if s.dtype == torch.int32 else s.to(torch.int32)

    # expect: SG203
    def decode_dcp(self, query, layer, forward_batch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("decode_dcp is only wired for DCP deployments")
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = self._kernel_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=as_dense_query(query),
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(layer, raw_out, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)


class LocalLensFnCuteDslMLABackend(CuteDslMLABackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_lens = lambda s: self._get_dcp_local_seq_lens(s).to(torch.int32)

    # expect: clean
    def decode_dcp(self, query, layer, forward_batch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("decode_dcp is only wired for DCP deployments")
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_lens = self._kernel_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=as_dense_query(query),
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish(layer, raw_out, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1)

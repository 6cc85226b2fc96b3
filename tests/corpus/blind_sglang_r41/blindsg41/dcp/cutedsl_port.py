"""cute-dsl MLA (DCP-capable) fork.

``CuteDslMLABackend._run_decode_kernel`` with ``cp_world > 1`` forwards
``enable_dcp=True`` to FlashInfer: ``seq_lens`` are this rank's lengths over
its compact page table and ``causal_seqs`` the global per-request lengths.
"""

from __future__ import annotations

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg41.common.dcp_lens import DcpLens, split_lens

if is_flashinfer_available():
    import flashinfer


class ForkCuteDslMLABackend(CuteDslMLABackend):
    def _md(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        md = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if md is None or md.batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            md = forward_batch.decode_trtllm_mla_metadata
        return md

    def _finish(self, raw_out, lse, local_lens, layer, bs, q_len=1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        indptr = self.q_indptr_decode[: bs + 1] * q_len
        fixup_zero_kv_rows(output, lse, local_lens, indptr, q_len)
        return output.flatten(1), lse

    # expect: SG203
    def decode_dcp_step(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        query = query.unsqueeze(1) if query.dim() == 3 else query
        if not parallel.dcp_enabled:
            return self._run_decode_kernel(
                query, kv_cache, md.block_kv_indices, md.seq_lens_k,
                md.max_seq_len_k, layer,
            )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=md.global_seq_lens_k[:bs],
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=md.seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, md.seq_lens_k[:bs], layer, bs)

    # expect: clean
    def decode_hoisted(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        query = query.unsqueeze(1) if query.dim() == 3 else query
        if not parallel.dcp_enabled:
            return self._run_decode_kernel(
                query, kv_cache, md.block_kv_indices, md.seq_lens_k,
                md.max_seq_len_k, layer,
            )
        local_lens = md.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=md.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_lens, layer, bs)

    # expect: SG203
    def decode_dcp_metadata_lens(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        query = query.unsqueeze(1) if query.dim() == 3 else query
        local_lens = self._get_dcp_local_seq_lens(md.seq_lens_k[:bs])
        global_lens = (
            md.global_seq_lens_k[:bs]
            if md.global_seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_lens, layer, bs)

    # expect: clean
    def decode_from_batch(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_decode_or_idle()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        query = query.unsqueeze(1) if query.dim() == 3 else query
        lens = DcpLens.from_global(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=lens.kernel_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.causal_bound,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, lens.kernel_lens, layer, bs)

    # expect: SG203
    def verify_from_split(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        local_lens, global_lens = split_lens(forward_batch.seq_lens[:bs] + ndt)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_lens, layer, bs, ndt)

    # expect: clean
    def verify_split_lens(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        parallel = get_parallel()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        global_lens, local_lens = split_lens(forward_batch.seq_lens[:bs] + ndt)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, local_lens, layer, bs, ndt)

    # expect: SG203
    def verify_cute_direct(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        # Rank-local lengths over the rank-local page table; one launch for
        # the whole verify window.
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k.to(torch.int32),
            max_seq_len=md.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            return_lse=True,
        )
        return self._finish(raw_out, lse, md.seq_lens_k, layer, bs, ndt)

    # expect: clean
    def verify_via_base_hook(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        assert forward_batch.forward_mode.is_target_verify()
        md = self._md(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        # cp_world stays 1 here, so this goes through the trtllm_mla hook.
        out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k + ndt,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

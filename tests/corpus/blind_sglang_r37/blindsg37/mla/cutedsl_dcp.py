"""CuteDSL MLA under DCP.

The monolithic cute-dsl MLA decode kernel takes ``enable_dcp`` / ``cp_world``
/ ``cp_rank`` / ``causal_seqlens_kv_global`` and returns the rank-local
``(out, lse)`` the cross-rank merge in ``forward_mla`` consumes. These are
the fork's launch paths for decode, target verify and draft extend.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg37.mla.builders import DcpLens, decode_lens_from_metadata, verify_kv_lens

if is_flashinfer_available():
    import flashinfer


class _CuteDslDcpBase(CuteDslMLABackend):
    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _dense_query(self, q, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        return q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)

    def _merge_ready(self, raw_out, lse, local_seq_lens, layer, bs, q_len):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1] * q_len, q_len
        )
        return output.flatten(1), lse


class ForkCuteDslMLABackend(_CuteDslDcpBase):
    def _kernel_common(self, query, kv_cache, metadata, layer):
        return dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def verify_launch(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self.forward_extend(q, None, None, layer, forward_batch, save_kv_cache=False)
        metadata = self._metadata(forward_batch)
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            seq_lens=metadata.seq_lens_k,
            backend="cute-dsl",
            return_lse=True,
            **self._kernel_common(query, kv_cache, metadata, layer),
        )
        return self._merge_ready(
            raw_out, lse, metadata.seq_lens_k, layer, forward_batch.batch_size, query.shape[1]
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: clean
    def verify_launch_monolithic(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self.forward_extend(q, None, None, layer, forward_batch, save_kv_cache=False)
        metadata = self._metadata(forward_batch)
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            seq_lens=metadata.seq_lens_k,
            backend="cute-dsl",
            return_lse=True,
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            **self._kernel_common(query, kv_cache, metadata, layer),
        )
        return self._merge_ready(
            raw_out, lse, metadata.seq_lens_k, layer, forward_batch.batch_size, query.shape[1]
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted lens)
    # expect: SG203
    def forward_decode_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = self._metadata(forward_batch)
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = (
                metadata.seq_lens_k[:bs]
                if metadata.seq_lens_k is not None
                else global_seq_lens
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
        return self._merge_ready(raw_out, lse, local_seq_lens, layer, bs, 1)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted lens)
    # expect: clean
    def forward_decode_dcp_v2(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        metadata = self._metadata(forward_batch)
        local_seq_lens, global_seq_lens = decode_lens_from_metadata(metadata, forward_batch)
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
        return self._merge_ready(raw_out, lse, local_seq_lens, layer, bs, 1)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify)
    # expect: SG203
    def verify_with_dcp_lens(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        ndt = forward_batch.spec_info.draft_token_num
        lens = DcpLens.from_global(verify_kv_lens(forward_batch, ndt))
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, lens.local, layer, forward_batch.batch_size, ndt
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify)
    # expect: clean
    def verify_with_lens_pair(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        ndt = forward_batch.spec_info.draft_token_num
        lens = DcpLens.from_global(verify_kv_lens(forward_batch, ndt))
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, lens.local, layer, forward_batch.batch_size, ndt
        )

    def _dcp_block_table(self, forward_batch: ForwardBatch) -> torch.Tensor:
        bs = forward_batch.batch_size
        metadata = self._metadata(forward_batch)
        block_kv_indices = torch.full_like(metadata.block_kv_indices, -1)
        self._fill_dcp_block_kv_indices(
            block_kv_indices, forward_batch.req_pool_indices[:bs], forward_batch.seq_lens[:bs]
        )
        return block_kv_indices

    def _launch_from_batch(self, query, kv_cache, layer, forward_batch, block_tables, causal):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=self._metadata(forward_batch).max_seq_len_k,
            layer=layer,
            causal_seqs=causal[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, forward_batch.seq_lens[:bs], layer, bs, 1)

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.capture_one_shape.run_once (backup / restore)
    # expect: SG203
    def forward_decode_swapped(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        saved_seq_lens = forward_batch.seq_lens
        try:
            forward_batch.seq_lens = self._get_dcp_local_seq_lens(saved_seq_lens)
            block_tables = self._dcp_block_table(forward_batch)
        finally:
            forward_batch.seq_lens = saved_seq_lens
        return self._launch_from_batch(
            query, kv_cache, layer, forward_batch, block_tables, causal=saved_seq_lens
        )

    # idiom: sglang/srt/speculative/eagle_draft_cuda_graph_runner.py EAGLEDraftCudaGraphRunner.capture_one_shape.run_once (backup / restore)
    # expect: clean
    def forward_decode_scoped(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        saved_seq_lens = forward_batch.seq_lens
        try:
            forward_batch.seq_lens = self._get_dcp_local_seq_lens(saved_seq_lens)
            block_tables = self._dcp_block_table(forward_batch)
            return self._launch_from_batch(
                query, kv_cache, layer, forward_batch, block_tables, causal=saved_seq_lens
            )
        finally:
            forward_batch.seq_lens = saved_seq_lens

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target_verify max_seq_len / seq_lens_k)
    # expect: SG203
    def spec_or_decode_launch(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        mode = forward_batch.forward_mode
        metadata = self._metadata(forward_batch)
        ndt = forward_batch.spec_info.draft_token_num if mode.is_target_verify() else 0
        global_lens = verify_kv_lens(forward_batch, ndt)
        seq_lens = (
            self._get_dcp_local_seq_lens(global_lens)
            if mode.is_decode_or_idle()
            else global_lens
        )
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, seq_lens, layer, forward_batch.batch_size, query.shape[1]
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target_verify max_seq_len / seq_lens_k)
    # expect: clean
    def launch_spec_or_decode(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        mode = forward_batch.forward_mode
        metadata = self._metadata(forward_batch)
        ndt = forward_batch.spec_info.draft_token_num if mode.is_target_verify() else 0
        global_lens = verify_kv_lens(forward_batch, ndt)
        seq_lens = (
            self._get_dcp_local_seq_lens(global_lens)
            if parallel.dcp_enabled
            else global_lens
        )
        query = self._dense_query(q, layer, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(
            raw_out, lse, seq_lens, layer, forward_batch.batch_size, query.shape[1]
        )


class PartialLaunchCuteDslMLABackend(_CuteDslDcpBase):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        parallel = get_parallel()
        self._dcp_launch = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            backend="cute-dsl",
            enable_dcp=parallel.dcp_enabled,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            return_lse=True,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend_v2 branch)
    # expect: clean
    def draft_extend_launch(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        query = self._dense_query(q, layer, forward_batch)
        causal = (
            {"causal_seqlens_kv_global": metadata.global_seq_lens_k}
            if get_parallel().dcp_enabled
            else {}
        )
        return self._dcp_launch(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + query.shape[1],
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            **causal,
        )


class PlainPartialLaunchCuteDslMLABackend(_CuteDslDcpBase):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_launch = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            backend="cute-dsl",
            return_lse=True,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend_v2 branch)
    # expect: SG203
    def draft_extend_launch(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        query = self._dense_query(q, layer, forward_batch)
        causal = {}
        return self._dcp_launch(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + query.shape[1],
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            **causal,
        )


class HoistedLensCuteDslMLABackend(_CuteDslDcpBase):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.global_seq_lens_k

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (metadata.seq_lens_k / global_seq_lens_k)
    # expect: SG203
    def _forward_decode_hoisted(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.kernel_seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, self.kernel_seq_lens[:bs], layer, bs, 1)


class PerStepLensCuteDslMLABackend(_CuteDslDcpBase):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.seq_lens_k

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (metadata.seq_lens_k / global_seq_lens_k)
    # expect: clean
    def _forward_decode_hoisted(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.kernel_seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, self.kernel_seq_lens[:bs], layer, bs, 1)

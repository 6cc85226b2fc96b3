"""Vendor DCP port on the flashinfer cute-dsl MLA kernel (``enable_dcp``):
rank-local ``seq_lens`` plus the whole lengths as ``causal_seqlens_kv_global``."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg34.dcp.lens import (
    draft_extend_global_lens,
    global_and_local,
    to_local,
    verify_global_lens,
)

if is_flashinfer_available():
    import flashinfer


class VendorCuteDslMLADcpBackend(CuteDslMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        parallel = get_parallel()
        self.dcp_world = parallel.dcp_size if parallel.dcp_enabled else 1
        self.dcp_rank = parallel.dcp_rank if parallel.dcp_enabled else 0
        self.server_args = model_runner.server_args
        self._dcp_decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=self.dcp_world,
            cp_rank=self.dcp_rank,
            return_lse=True,
        )

    # -- helpers (no length decisions here) ---------------------------------
    def _kv_cache(self, layer: RadixAttention) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _launch(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        causal_global: torch.Tensor,
        max_seq_len: int,
    ):
        return self._dcp_decode(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqlens_kv_global=causal_global.to(torch.int32),
        )

    def _finish(self, raw_out, lse, local_lens, bs: int, q_len: int, layer):
        output = raw_out.view(bs * q_len, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * q_len, layer.tp_q_head_num)
        indptr = (
            self.q_indptr_decode[: bs + 1]
            if q_len == 1
            else self._dense_q_indptr(bs, q_len)
        )
        fixup_zero_kv_rows(output, lse, local_lens, indptr, q_len)
        return output.flatten(1), lse

    # -- launches ------------------------------------------------------------
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch, causal_seqs=global_seq_lens_k)
    # expect: clean
    def forward_spec_dcp(
        self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch
    ):
        mode = forward_batch.forward_mode
        assert mode.is_target_verify() or mode.is_draft_extend_v2()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        q_len = (
            forward_batch.spec_info.draft_token_num
            if mode.is_target_verify()
            else self.num_draft_tokens
        )
        query = q.to(self.data_type).view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        local_lens = metadata.seq_lens_k[:bs]
        global_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, q_len, layer)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (global_seq_lens / local_seq_lens pair)
    # expect: clean
    def decode_dcp_pair(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens, local_lens = global_and_local(
            forward_batch.seq_lens[:bs], self.dcp_world, self.dcp_rank
        )
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (trtllm_batch_decode_with_kv_cache_mla, enable_dcp=True)
    # expect: clean
    def decode_dcp_partial(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = get_dcp_lens(global_lens, self.dcp_world, self.dcp_rank).to(torch.int32)
        raw_out, lse = self._dcp_decode(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqlens_kv_global=global_lens,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (host seq_lens_cpu fast path)
    # expect: clean
    def decode_dcp_host_fast(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if forward_batch.seq_lens_cpu is not None:
            host_global = forward_batch.seq_lens_cpu[:bs]
            host_local = get_dcp_lens(host_global, self.dcp_world, self.dcp_rank)
            local_lens = host_local.to(query.device, torch.int32, non_blocking=True)
            global_lens = host_global.to(query.device, torch.int32, non_blocking=True)
        else:
            global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_lens = to_local(global_lens, self.dcp_world, self.dcp_rank)
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)


class CuteDslDcpSwappedPair(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (global_seq_lens / local_seq_lens pair)
    # expect: SG203
    def decode_dcp_pair(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        local_lens, global_lens = global_and_local(
            forward_batch.seq_lens[:bs], self.dcp_world, self.dcp_rank
        )
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)


class CuteDslDcpPartialNoLocal(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (trtllm_batch_decode_with_kv_cache_mla, enable_dcp=True)
    # expect: SG203
    def decode_dcp_partial(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        # cp_world / cp_rank are bound in the partial: the kernel shards.
        raw_out, lse = self._dcp_decode(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqlens_kv_global=seq_lens,
        )
        return self._finish(raw_out, lse, seq_lens, bs, 1, layer)


class CuteDslDcpHostFastPath(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (host seq_lens_cpu fast path)
    # expect: SG203
    def decode_dcp_host_fast(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        if forward_batch.seq_lens_cpu is not None:
            # Host lens already resident: skip the device-side shard math.
            lens = forward_batch.seq_lens_cpu[:bs].to(
                query.device, torch.int32, non_blocking=True
            )
            raw_out, lse = self._launch(
                query, layer, metadata.block_kv_indices, lens, lens,
                metadata.max_seq_len_k,
            )
            return self._finish(raw_out, lse, lens, bs, 1, layer)
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = to_local(global_lens, self.dcp_world, self.dcp_rank)
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)


class CuteDslUnifiedDcpForward(VendorCuteDslMLADcpBackend):
    """One launch for decode, target verify and draft extend."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (global_seq_lens / local_seq_lens pair)
    # expect: SG203
    def forward_dcp(self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        mode = forward_batch.forward_mode
        bs = forward_batch.batch_size
        if mode.is_target_verify():
            q_len = forward_batch.spec_info.draft_token_num
            global_lens = verify_global_lens(forward_batch.seq_lens[:bs], q_len)
        elif mode.is_draft_extend_v2():
            q_len = self.num_draft_tokens
            global_lens = draft_extend_global_lens(forward_batch)[:bs]
        else:
            q_len = 1
            global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if q_len == 1:
            seq_lens = to_local(global_lens, self.dcp_world, self.dcp_rank)
        else:
            # Multi-token rows: the kernel clips every row against
            # causal_seqlens_kv_global, so hand it the full extent.
            seq_lens = global_lens
        query = q.to(self.data_type).view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, seq_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, seq_lens, bs, q_len, layer)


class CuteDslDcpKvShardsFromCp(VendorCuteDslMLADcpBackend):
    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        # Number of sequence shards the KV cache is cut into.
        self.kv_seq_shards = model_runner.server_args.attn_cp_size

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens (get_dcp_lens with the DCP world size)
    # expect: SG203
    def decode_dcp_sharded(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = get_dcp_lens(global_lens, self.kv_seq_shards, self.dcp_rank).to(
            torch.int32
        )
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)


class CuteDslDcpKvShardsFromDcp(VendorCuteDslMLADcpBackend):
    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.kv_seq_shards = model_runner.server_args.dcp_size

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens (get_dcp_lens with the DCP world size)
    # expect: clean
    def decode_dcp_sharded(self, query: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = get_dcp_lens(global_lens, self.kv_seq_shards, self.dcp_rank).to(
            torch.int32
        )
        raw_out, lse = self._launch(
            query, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, local_lens, bs, 1, layer)


class CuteDslDraftExtendOverwrite(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (NOTE(draft_extend seq_len handling))
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return
        metadata = self.forward_decode_metadata
        # Re-derive the padded key length from the live extend lens (the
        # parent used the static window).
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        seq_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.global_seq_lens_k = metadata.seq_lens_k
        metadata.max_seq_len_q = max_seq_len_q
        forward_batch.decode_trtllm_mla_metadata = metadata


class CuteDslDraftExtendFixup(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (NOTE(draft_extend seq_len handling))
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return
        metadata = self.forward_decode_metadata
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        global_lens = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        ).to(torch.int32)
        metadata.global_seq_lens_k = global_lens
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(global_lens)
        metadata.max_seq_len_q = max_seq_len_q
        forward_batch.decode_trtllm_mla_metadata = metadata

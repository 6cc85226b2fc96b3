"""cutedsl_mla fork: DCP decode and DCP target verify entry points."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Tuple

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg22.attn.mla_common import build_mla_query, finish_dcp_decode, mla_kv_cache
from blindsg22.common.lens import split_dcp_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

StateOut = Tuple[torch.Tensor, torch.Tensor]


class ForkCuteDslMLABackend(CuteDslMLABackend):
    """cutedsl_mla with the fork's DCP entry points (DCP is on for these)."""

    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # ------------------------------------------------------------------
    # Decode (one query token per request).
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted metadata lens)
    # expect: SG203
    def forward_decode_hoisted(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, global_seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted path: seq_lens_k local, global_seq_lens_k as causal bound)
    # expect: clean
    def forward_decode_hoisted_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (fallback path, lens carried in a namedtuple)
    # expect: SG203
    def forward_decode_split_lens(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, lens.local, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (fallback path: local from _get_dcp_local_seq_lens, global as causal_seqs), via a namedtuple
    # expect: clean
    def forward_decode_split_lens_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, lens.local, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel bound with functools.partial
    # expect: SG203
    def forward_decode_partial(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        launch = functools.partial(
            self._run_decode_kernel,
            kv_cache=mla_kv_cache(self, layer),
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = launch(
            query=build_mla_query(q, q_rope, layer, 1),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            causal_seqs=seq_lens,
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel bound with functools.partial, local lens from layers/dcp/layout.py get_dcp_lens
    # expect: clean
    def forward_decode_partial_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        launch = functools.partial(
            self._run_decode_kernel,
            kv_cache=mla_kv_cache(self, layer),
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        raw_out, lse = launch(
            query=build_mla_query(q, q_rope, layer, 1),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            causal_seqs=global_lens,
        )
        return finish_dcp_decode(
            raw_out, lse, local_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Target verify (draft_token_num query tokens per request).
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch) on cutedsl_mla
    # expect: SG203
    def forward_verify_dcp_bound(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        local_seq_lens = metadata.seq_lens_k[:bs]
        # The kernel needs a bound for the newest query token of each request.
        causal_bound = local_seq_lens
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=causal_bound,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            local_seq_lens,
            self._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (cp_world > 1 without causal_seqs raises before any launch)
    # expect: clean
    def forward_verify_dcp_unbounded(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        local_seq_lens = metadata.seq_lens_k[:bs]
        # No bound is passed: with cp_world > 1 the cute-dsl hook refuses
        # the launch (ValueError) instead of running without one.
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            local_seq_lens,
            self._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (verify lens = seq_lens + num_draft_tokens) launched eagerly
    # expect: SG203
    def forward_verify_window_lens(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        verify_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=verify_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=verify_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            verify_lens,
            self._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (verify: global = seq_lens + N, local = _get_dcp_local_seq_lens(global))
    # expect: clean
    def forward_verify_window_lens_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        verify_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(verify_lens)
        raw_out, lse = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=verify_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            local_lens,
            self._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )

"""Fork variants of ``TRTLLMMLABackend`` around decode context parallel (DCP).

Upstream keeps two length views on ``TRTLLMMLADecodeMetadata`` under DCP:
``global_seq_lens_k`` (the whole request) and ``seq_lens_k`` (this rank's
interleaved share, what the decode kernel walks through the rank-local page
table).  These subclasses change when and where those views are produced.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.utils import is_flashinfer_available

from blindsg21.attn._mla_common import MLAQueryPrepMixin
from blindsg21.attn.mla_launch import mla_decode
from blindsg21.common.dcp_lens import chain_token_frontiers

if is_flashinfer_available():
    import flashinfer


# --------------------------------------------------------------------------
# Metadata set-up (eager and CUDA-graph replay)
# --------------------------------------------------------------------------


class PrivateLensTRTLLMBackend(TRTLLMMLABackend):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        md = self.forward_decode_metadata
        if md is None or not forward_batch.forward_mode.is_decode_or_idle():
            return
        # The overlap scheduler bumps forward_batch.seq_lens in place for the
        # next step while this one is in flight; give the kernels a private
        # int32 copy rather than something that may alias it.
        md.seq_lens_k = forward_batch.seq_lens.to(torch.int32, copy=True)


class PrivateLocalLensTRTLLMBackend(TRTLLMMLABackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        md = self.forward_decode_metadata
        if md is None or not forward_batch.forward_mode.is_decode_or_idle():
            return
        # Private copies of whatever the upstream init derived (rank-local
        # lengths under DCP, the global ones beside them).
        md.seq_lens_k = md.seq_lens_k.clone()
        if md.global_seq_lens_k is not None:
            md.global_seq_lens_k = md.global_seq_lens_k.clone()


class ReplayTRTLLMBackend(TRTLLMMLABackend):
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        # Localise once for the page table, then refresh the kernel-side
        # buffer from the same capture-stable source.
        local = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local
        )
        metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)


class ReplayLocalTRTLLMBackend(TRTLLMMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        local = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local
        )
        metadata.seq_lens_k.copy_(local)


class FastReplayTRTLLMBackend(TRTLLMMLABackend):
    # expect: SG203
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if (
            in_capture
            or not get_parallel().dcp_enabled
            or not forward_batch.forward_mode.is_decode_or_idle()
        ):
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        # DCP decode replay: refresh the capture-stable buffers directly.
        bs = forward_batch.batch_size
        md = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        md.global_seq_lens_k.copy_(seq_lens)
        md.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            md.block_kv_indices,
            forward_batch.req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )


class FastReplayLocalTRTLLMBackend(TRTLLMMLABackend):
    # expect: clean
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if (
            in_capture
            or not get_parallel().dcp_enabled
            or not forward_batch.forward_mode.is_decode_or_idle()
        ):
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        md = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        local = self._get_dcp_local_seq_lens(seq_lens)
        md.global_seq_lens_k.copy_(seq_lens)
        md.seq_lens_k.copy_(local)
        self._fill_dcp_block_kv_indices(
            md.block_kv_indices, forward_batch.req_pool_indices[:bs], local
        )


class FormulaLensTRTLLMBackend(TRTLLMMLABackend):
    """Closed-form rank-local length (no temporaries on the replay path)."""

    # expect: clean
    def _get_dcp_local_seq_lens(self, seq_lens: torch.Tensor) -> torch.Tensor:
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return seq_lens
        n, r = parallel.dcp_size, parallel.dcp_rank
        # Count of positions p < len with p % n == r.
        return torch.div(seq_lens + (n - 1 - r), n, rounding_mode="floor").to(
            torch.int32
        )


# --------------------------------------------------------------------------
# DCP decode launch
# --------------------------------------------------------------------------


class HoistedTRTLLMBackend(MLAQueryPrepMixin, TRTLLMMLABackend):
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # Rank-local, refreshed once per step by init_forward_metadata or the
        # graph replay prep; never recomputed per layer.
        local = metadata.seq_lens_k[:bs]
        raw_out, lse = mla_decode(
            self,
            query,
            kv_cache,
            metadata.block_kv_indices,
            local,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local, layer, bs)


class CachedDcpTRTLLMBackend(MLAQueryPrepMixin, TRTLLMMLABackend):
    @functools.cached_property
    def _dcp_world(self):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return 1, 0
        return parallel.dcp_size, parallel.dcp_rank

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        world, rank = self._dcp_world
        bs = forward_batch.batch_size
        local = get_dcp_lens(forward_batch.seq_lens[:bs], world, rank).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local, layer, bs)


# --------------------------------------------------------------------------
# Speculative (multi-token) DCP paths
# --------------------------------------------------------------------------


class _DcpSpecRoutingBase(MLAQueryPrepMixin, TRTLLMMLABackend):
    """Sends DCP target-verify / draft-extend to ``_dcp_spec_forward``."""

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        mode = forward_batch.forward_mode
        if (
            not (mode.is_target_verify() or mode.is_draft_extend_v2())
            or not get_parallel().dcp_enabled
            or cos_sin_cache is not None
            or get_in_autotune_dummy_run()
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        return self._dcp_spec_forward(
            query, self._paged_kv(layer), self._decode_md(forward_batch), layer,
            forward_batch,
        )

    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        raise NotImplementedError

    def _verify_state(self, raw_out, lse, md, layer, bs: int, n: int):
        output = raw_out.view(bs * n, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * n, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, md.seq_lens_k, self._dense_q_indptr(bs, n), n)
        return output.flatten(1), lse


class FallbackVerifyTRTLLMBackend(_DcpSpecRoutingBase):
    # expect: SG203
    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        n = query.shape[0] // bs
        q4 = query.view(bs, n, layer.tp_q_head_num, layer.head_dim)
        try:
            raw_out, lse = self._run_decode_kernel(
                query=q4,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=md.seq_lens_k,
                max_seq_len=md.max_seq_len_k,
                layer=layer,
                causal_seqs=md.global_seq_lens_k,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        except NotImplementedError:
            # trtllm-gen has no in-kernel DCP. The rank-local page table and
            # lengths still bound every row, so run the plain kernel and let
            # the cross-rank merge combine the partial states.
            raw_out, lse = mla_decode(
                self,
                q4,
                kv_cache,
                md.block_kv_indices,
                md.seq_lens_k,
                md.max_seq_len_k,
                layer,
                return_lse=True,
            )
        return self._verify_state(raw_out, lse, md, layer, bs, n)


class DcpDraftExtendTRTLLMBackend(_DcpSpecRoutingBase):
    # expect: SG203
    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        if forward_batch.forward_mode.is_target_verify():
            raise NotImplementedError(
                "DCP target verify needs the cute-dsl kernel (--attention-backend cutedsl_mla)"
            )
        bs = forward_batch.batch_size
        total_tokens = query.shape[0]
        max_q = max(forward_batch.extend_seq_lens_cpu)
        cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0)
        )
        padded_q = query.new_zeros((bs, max_q, layer.tp_q_head_num, layer.head_dim))
        padded_q = self.pad_draft_extend_query(
            query, padded_q, forward_batch.extend_seq_lens, cu_seqlens_q
        )
        # md.seq_lens_k is already this rank's share (localised in
        # init_forward_metadata), so the page walk stays inside the shard.
        raw_out, lse = mla_decode(
            self,
            padded_q,
            kv_cache,
            md.block_kv_indices,
            md.seq_lens_k,
            md.max_seq_len_k + max_q,
            layer,
            return_lse=True,
        )
        out = self.unpad_draft_extend_output(
            raw_out, cu_seqlens_q, forward_batch.extend_seq_lens, total_tokens
        )
        lse = lse.view(bs, max_q, -1)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class RefusingSpecTRTLLMBackend(_DcpSpecRoutingBase):
    # expect: clean
    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        bs = forward_batch.batch_size
        tokens_per_req = query.shape[0] // max(bs, 1)
        if tokens_per_req > 1 or forward_batch.forward_mode.is_target_verify():
            raise NotImplementedError(
                f"{forward_batch.forward_mode.name} with {tokens_per_req} tokens/request "
                "under DCP needs a global causal bound; use cutedsl_mla"
            )
        # One token per request: the rank-local decode covers it exactly.
        local = md.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local, layer, bs)


class VerifyLensTRTLLMBackend(_DcpSpecRoutingBase):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(
            model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf,
            backend="cute-dsl",
        )

    # expect: SG203
    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        if not forward_batch.forward_mode.is_target_verify():
            raise NotImplementedError("DCP draft extend is not supported")
        bs = forward_batch.batch_size
        n = forward_batch.spec_info.draft_token_num
        # KV after the verify window is written: prefix + draft tokens.
        kv_lens = (forward_batch.seq_lens[:bs] + n).to(torch.int32)
        q4 = query.view(bs, n, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = mla_decode(
            self,
            q4,
            kv_cache,
            md.block_kv_indices,
            kv_lens,
            md.max_seq_len_k,
            layer,
            causal_lens=kv_lens,
        )
        return self._verify_state(raw_out, lse, md, layer, bs, n)


class ChainSplitVerifyTRTLLMBackend(_DcpSpecRoutingBase):
    """DCP chain verify on trtllm-gen: one decode row per draft token, each
    with its own rank-local causal frontier, so no in-kernel DCP is needed."""

    # expect: clean
    def _dcp_spec_forward(self, query, kv_cache, md, layer, forward_batch):
        if not forward_batch.forward_mode.is_target_verify():
            raise NotImplementedError("DCP draft extend is not supported")
        spec_info = forward_batch.spec_info
        if spec_info.topk > 1:
            raise NotImplementedError("tree verify needs a per-token mask under DCP")
        bs = forward_batch.batch_size
        n = spec_info.draft_token_num
        # md.global_seq_lens_k = prefix + n; token j of the window sees the
        # prefix and draft tokens 0..j: frontier_j = prefix + j + 1.
        frontiers = chain_token_frontiers(md.global_seq_lens_k[:bs], n)
        block_tables = md.block_kv_indices[:bs].repeat_interleave(n, dim=0)
        rows = bs * n
        raw_out, lse = self._run_decode_kernel(
            query=query.view(rows, 1, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=frontiers,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(rows, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(rows, layer.tp_q_head_num)
        row_indptr = torch.arange(rows + 1, dtype=torch.int32, device=query.device)
        fixup_zero_kv_rows(output, lse, frontiers, row_indptr, 1)
        return output.flatten(1), lse


class NoSpecDcpTRTLLMBackend(MLAQueryPrepMixin, TRTLLMMLABackend):
    """trtllm-gen deployment backend: DCP and speculative decoding are
    mutually exclusive here (checked at construction)."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        if get_parallel().dcp_enabled and get_spec().speculative_num_draft_tokens:
            raise ValueError(
                "trtllm_mla (fork): decode context parallel cannot be combined "
                "with speculative decoding; use cutedsl_mla"
            )
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not forward_batch.forward_mode.is_target_verify()
            or cos_sin_cache is not None
            or forward_batch.spec_info.ragged_verify_layout is not None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        n = forward_batch.spec_info.draft_token_num
        md = self._decode_md(forward_batch)
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.view(bs, n, layer.tp_q_head_num, layer.head_dim),
            kv_cache=self._paged_kv(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k + n,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

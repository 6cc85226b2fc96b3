"""More cute-dsl DCP overrides: speculative verify / draft extend through
the cute-dsl kernel, graph-replay metadata refresh, and decode variants that
reach the length buffers through properties, dicts and try/finally."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg42.attn.cutedsl_mla_fork import _DcpQueryMixin

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


def _is_dcp_verify(forward_batch: ForwardBatch) -> bool:
    return forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled


def _is_dcp_draft_extend(forward_batch: ForwardBatch) -> bool:
    return (
        forward_batch.forward_mode.is_draft_extend_v2() and get_parallel().dcp_enabled
    )


class CuteDslBoundVerifyMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """DCP target verify with the invariant kernel arguments bound once per
    forward (the per-layer call then only supplies query and lengths)."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if (
            not _is_dcp_verify(forward_batch)
            or get_in_autotune_dummy_run()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        parallel = get_parallel()
        q = self._dcp_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_cache = self._dcp_kv_cache(layer)
        q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)

        launch = functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        raw_out, lse = launch(query=q, seq_lens=metadata.seq_lens_k)
        output = raw_out.view(
            bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim
        )
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class CuteDslPartialVerifyMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Bound-argument DCP verify with the global bound bound in."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if (
            not _is_dcp_verify(forward_batch)
            or get_in_autotune_dummy_run()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        parallel = get_parallel()
        q = self._dcp_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_cache = self._dcp_kv_cache(layer)
        q = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)

        launch = functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        raw_out, lse = launch(query=q, seq_lens=metadata.seq_lens_k)
        output = raw_out.view(
            bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim
        )
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class CuteDslDraftExtendMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Runs the fixed-window DCP draft extend on the cute-dsl kernel (upstream
    refuses it on this backend)."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if (
            not _is_dcp_draft_extend(forward_batch)
            or get_in_autotune_dummy_run()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        parallel = get_parallel()
        q = self._dcp_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        if bs == 0 or total_tokens % bs != 0:
            raise NotImplementedError("DCP draft extend needs a fixed query window")
        tokens_per_seq = total_tokens // bs
        kv_cache = self._dcp_kv_cache(layer)
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)

        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(total_tokens, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(total_tokens, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, tokens_per_seq),
            tokens_per_seq,
        )
        return output.flatten(1), lse


class CuteDslWindowDraftExtendMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Fixed-window DCP draft extend on cute-dsl, bounded by the global
    post-write lengths."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if (
            not _is_dcp_draft_extend(forward_batch)
            or get_in_autotune_dummy_run()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        parallel = get_parallel()
        q = self._dcp_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        if bs == 0 or total_tokens % bs != 0:
            raise NotImplementedError("DCP draft extend needs a fixed query window")
        tokens_per_seq = total_tokens // bs
        kv_cache = self._dcp_kv_cache(layer)
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)

        raw_out, lse = self._run_decode_kernel(
            query=q,
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
        output = raw_out.view(total_tokens, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(total_tokens, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, tokens_per_seq),
            tokens_per_seq,
        )
        return output.flatten(1), lse


class CuteDslPagedLensPropertyMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Exposes the paging lengths as a property for the decode override and
    the fork's KV-usage metrics."""

    @property
    def dcp_paged_lens(self) -> torch.Tensor:
        metadata: TRTLLMMLADecodeMetadata = self.forward_decode_metadata
        if metadata.global_seq_lens_k is not None:
            return metadata.global_seq_lens_k
        return metadata.seq_lens_k

    # expect: SG203
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        paged_lens = self.dcp_paged_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=paged_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, paged_lens, layer, bs)


class CuteDslLensPropertyMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Property variant exposing this rank's paging lengths."""

    @property
    def dcp_paged_lens(self) -> torch.Tensor:
        metadata: TRTLLMMLADecodeMetadata = self.forward_decode_metadata
        return metadata.seq_lens_k

    # expect: clean
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        paged_lens = self.dcp_paged_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=paged_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, paged_lens, layer, bs)


class CuteDslFixupOrderMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Temporarily re-points ``seq_lens_k`` while the launch and the zero-KV
    fixup run, restoring it afterwards for the next layer."""

    # expect: SG203
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        saved_seq_lens_k = metadata.seq_lens_k
        try:
            metadata.seq_lens_k = metadata.global_seq_lens_k
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
        finally:
            metadata.seq_lens_k = saved_seq_lens_k
        return self._dcp_finish(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class CuteDslReleasingMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """try/finally around the launch that drops the per-step metadata
    reference (so graph-owned buffers are not pinned by the backend)."""

    _last_dcp_metadata = None

    # expect: clean
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        self._last_dcp_metadata = metadata
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        try:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                causal_seqs=metadata.global_seq_lens_k[:bs],
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        finally:
            self._last_dcp_metadata = None
        return self._dcp_finish(raw_out, lse, local_seq_lens, layer, bs)


class CuteDslRoleTableMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Looks the kernel's length arguments up in a per-step role table."""

    # expect: SG203
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens_by_role = {
            "rank_local": metadata.seq_lens_k[:bs],
            "global": metadata.global_seq_lens_k[:bs],
        }
        kernel_roles = {"seq_lens": "global", "causal_seqs": "global"}
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens_by_role[kernel_roles["seq_lens"]],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens_by_role[kernel_roles["causal_seqs"]],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, lens_by_role["rank_local"], layer, bs)


class CuteDslRoleMapMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Role-table variant mapping paging to the rank-local view."""

    # expect: clean
    def forward_decode(
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or get_in_autotune_dummy_run():
            return super().forward_decode(
                q,
                k,
                v,
                layer,
                forward_batch,
                save_kv_cache,
                q_rope,
                k_rope,
                cos_sin_cache,
                is_neox,
                llama_4_scaling,
            )
        query = self._dcp_decode_query(
            q,
            k,
            layer,
            forward_batch,
            save_kv_cache,
            q_rope,
            k_rope,
            cos_sin_cache,
            is_neox,
            llama_4_scaling,
        )
        kv_cache = self._dcp_kv_cache(layer)
        metadata = self._dcp_metadata(forward_batch)
        bs = forward_batch.batch_size
        lens_by_role = {
            "rank_local": metadata.seq_lens_k[:bs],
            "global": metadata.global_seq_lens_k[:bs],
        }
        kernel_roles = {"seq_lens": "rank_local", "causal_seqs": "global"}
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens_by_role[kernel_roles["seq_lens"]],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=lens_by_role[kernel_roles["causal_seqs"]],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, lens_by_role["rank_local"], layer, bs)


class CuteDslVerifyReplayMLABackend(CuteDslMLABackend):
    """Graph-replay metadata refresh with the verify window folded into the
    capture-stable buffers in one pass."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_target_verify():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        torch.add(
            seq_lens[:bs],
            self.num_draft_tokens,
            out=metadata.global_seq_lens_k,
        )
        metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )


class CuteDslOnePassReplayMLABackend(CuteDslMLABackend):
    """Same one-pass verify refresh, with the rank-local copy derived from
    the global buffer."""

    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_target_verify():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        torch.add(
            seq_lens[:bs],
            self.num_draft_tokens,
            out=metadata.global_seq_lens_k,
        )
        metadata.seq_lens_k.copy_(
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        )
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            metadata.seq_lens_k,
        )

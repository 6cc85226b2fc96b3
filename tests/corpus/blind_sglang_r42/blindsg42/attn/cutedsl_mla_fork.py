"""cute-dsl MLA backends of the fork (decode context parallelism).

All classes subclass upstream ``CuteDslMLABackend`` (layers/attention/
cutedsl_mla_backend.py). Under DCP the cute-dsl kernel takes the rank-local
KV lengths as ``seq_lens`` (with the rank-local page table from
``TRTLLMMLABackend._fill_dcp_block_kv_indices``) and the global per-request
bound as ``causal_seqs`` (``causal_seqlens_kv_global`` in flashinfer).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import (
    concat_mla_absorb_q_general,
    mla_quantize_and_rope_for_fp8,
    mla_quantize_without_rope_for_fp8,
)
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg42.attn.dcp_lens import DcpLens, resolve_dcp_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class _DcpQueryMixin:
    """Query / KV preparation shared by the DCP decode overrides below
    (mirrors upstream cute-dsl ``forward_decode`` up to the kernel call)."""

    def _dcp_decode_query(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
        cos_sin_cache: Optional[torch.Tensor],
        is_neox: Optional[bool],
        llama_4_scaling: Optional[torch.Tensor],
    ) -> torch.Tensor:
        merge_query = q_rope is not None
        query = None
        if self.data_type == torch.float8_e4m3fn:
            assert q_rope is not None and k_rope is not None
            if cos_sin_cache is None:
                q, k, k_rope = mla_quantize_without_rope_for_fp8(
                    q, q_rope, k.squeeze(1), k_rope.squeeze(1)
                )
            else:
                q, k, k_rope = mla_quantize_and_rope_for_fp8(
                    q,
                    q_rope,
                    k.squeeze(1),
                    k_rope.squeeze(1),
                    forward_batch.positions,
                    cos_sin_cache,
                    is_neox,
                    self.kv_lora_rank,
                    self.qk_rope_head_dim,
                )
            merge_query = False
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if merge_query:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope_reshaped = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope_reshaped)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if llama_4_scaling is not None:
            query = (query.to(self.q_data_type) * llama_4_scaling).to(self.data_type)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return query

    def _dcp_kv_cache(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _dcp_metadata(self, forward_batch: ForwardBatch):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        metadata_batch_size = getattr(metadata, "batch_size", None)
        if (
            metadata_batch_size is not None
            and metadata_batch_size < forward_batch.batch_size
        ):
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _dcp_finish(self, raw_out, lse, local_seq_lens, layer, bs: int):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    def _dcp_extend_query(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> torch.Tensor:
        assert self.data_type == torch.bfloat16, "fork DCP extend path is bf16-only"
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope_reshaped = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            q = concat_mla_absorb_q_general(q_nope, q_rope_reshaped)
        return q.view(-1, layer.tp_q_head_num, layer.head_dim).to(self.data_type)


class CuteDslRankViewMLABackend(CuteDslMLABackend):
    """cute-dsl DCP decode with the int32 length conversion done once here
    instead of inside the kernel wrapper."""

    # expect: SG203
    def forward_decode(
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
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if not parallel.dcp_enabled:
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

        fp8_kv = self.data_type == torch.float8_e4m3fn
        if fp8_kv:
            # fp8 KV: quantize (and rope, when the layer hands us the cache)
            # in one pass; the query comes back already merged.
            assert q_rope is not None and k_rope is not None
            k_nope_2d, k_rope_2d = k.squeeze(1), k_rope.squeeze(1)
            if cos_sin_cache is not None:
                q, k, k_rope = mla_quantize_and_rope_for_fp8(
                    q,
                    q_rope,
                    k_nope_2d,
                    k_rope_2d,
                    forward_batch.positions,
                    cos_sin_cache,
                    is_neox,
                    self.kv_lora_rank,
                    self.qk_rope_head_dim,
                )
            else:
                q, k, k_rope = mla_quantize_without_rope_for_fp8(
                    q, q_rope, k_nope_2d, k_rope_2d
                )

        if save_kv_cache:
            assert k is not None and k_rope is not None
            write_loc = KVWriteLoc.for_batch(forward_batch)
            self.token_to_kv_pool.set_mla_kv_buffer(layer, write_loc, k, k_rope)

        heads = layer.tp_q_head_num
        if q_rope is not None and not fp8_kv:
            query = concat_mla_absorb_q_general(
                q.view(-1, heads, layer.v_head_dim),
                q_rope.view(-1, heads, layer.head_dim - layer.v_head_dim),
            )
        else:
            query = q.view(-1, heads, layer.head_dim)
        if llama_4_scaling is not None:
            scaled = query.to(self.q_data_type) * llama_4_scaling
            query = scaled.to(self.data_type)
        query = query.unsqueeze(1) if query.dim() == 3 else query

        kv_cache = paged_row_view(
            self.token_to_kv_pool.get_key_buffer(layer.layer_id), self.page_size
        ).unsqueeze(1)

        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None:
            metadata = self.forward_decode_metadata
        planned_bs = getattr(metadata, "batch_size", None)
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            # Planned before MLP-sync padding grew the batch: re-plan here.
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata

        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kernel_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

        out_3d = raw_out.view(-1, heads, layer.v_head_dim)
        lse = lse.view(-1, heads)
        # Rows this rank owns nothing of must merge as (0, -inf).
        fixup_zero_kv_rows(
            out_3d, lse, kernel_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return out_3d.flatten(1), lse


class CuteDslInlineMLABackend(CuteDslMLABackend):
    """Same override with upstream's hoisted-length handling kept verbatim."""

    # expect: clean
    def forward_decode(
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
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if not parallel.dcp_enabled:
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

        fp8_kv = self.data_type == torch.float8_e4m3fn
        if fp8_kv:
            # fp8 KV: quantize (and rope, when the layer hands us the cache)
            # in one pass; the query comes back already merged.
            assert q_rope is not None and k_rope is not None
            k_nope_2d, k_rope_2d = k.squeeze(1), k_rope.squeeze(1)
            if cos_sin_cache is not None:
                q, k, k_rope = mla_quantize_and_rope_for_fp8(
                    q,
                    q_rope,
                    k_nope_2d,
                    k_rope_2d,
                    forward_batch.positions,
                    cos_sin_cache,
                    is_neox,
                    self.kv_lora_rank,
                    self.qk_rope_head_dim,
                )
            else:
                q, k, k_rope = mla_quantize_without_rope_for_fp8(
                    q, q_rope, k_nope_2d, k_rope_2d
                )

        if save_kv_cache:
            assert k is not None and k_rope is not None
            write_loc = KVWriteLoc.for_batch(forward_batch)
            self.token_to_kv_pool.set_mla_kv_buffer(layer, write_loc, k, k_rope)

        heads = layer.tp_q_head_num
        if q_rope is not None and not fp8_kv:
            query = concat_mla_absorb_q_general(
                q.view(-1, heads, layer.v_head_dim),
                q_rope.view(-1, heads, layer.head_dim - layer.v_head_dim),
            )
        else:
            query = q.view(-1, heads, layer.head_dim)
        if llama_4_scaling is not None:
            scaled = query.to(self.q_data_type) * llama_4_scaling
            query = scaled.to(self.data_type)
        query = query.unsqueeze(1) if query.dim() == 3 else query

        kv_cache = paged_row_view(
            self.token_to_kv_pool.get_key_buffer(layer.layer_id), self.page_size
        ).unsqueeze(1)

        metadata = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if metadata is None:
            metadata = self.forward_decode_metadata
        planned_bs = getattr(metadata, "batch_size", None)
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            # Planned before MLP-sync padding grew the batch: re-plan here.
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata

        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
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

        out_3d = raw_out.view(-1, heads, layer.v_head_dim)
        lse = lse.view(-1, heads)
        # Rows this rank owns nothing of must merge as (0, -inf).
        fixup_zero_kv_rows(
            out_3d, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return out_3d.flatten(1), lse


class CuteDslOrderedArgsMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Passes the hoisted metadata buffers straight to the kernel hook."""

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
        raw_out, lse = self._run_decode_kernel(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.global_seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
            causal_seqs=metadata.seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class CuteDslPositionalArgsMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Positional-argument variant of the hoisted-buffer call."""

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
        raw_out, lse = self._run_decode_kernel(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class CuteDslLaunchRefreshMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Refreshes this rank's length view right before the launch."""

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
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.seq_lens_k[:bs])
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
        return self._dcp_finish(raw_out, lse, local_seq_lens, layer, bs)


class CuteDslStepRefreshMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Derives this rank's length view from the global lengths at launch."""

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
        global_seq_lens = metadata.global_seq_lens_k[:bs]
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
        return self._dcp_finish(raw_out, lse, local_seq_lens, layer, bs)


class CuteDslLensRecordMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Reads both views through ``resolve_dcp_lens`` (one place for the
    hoisted-vs-fallback choice)."""

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
        lens: DcpLens = resolve_dcp_lens(metadata, forward_batch, self)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_kv,
            max_seq_len=lens.max_local,
            layer=layer,
            causal_seqs=lens.global_kv,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(
            raw_out, lse, lens.rank_local, layer, forward_batch.batch_size
        )


class CuteDslLensViewMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """``resolve_dcp_lens`` variant passing each view to its own argument."""

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
        lens: DcpLens = resolve_dcp_lens(metadata, forward_batch, self)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.rank_local,
            max_seq_len=lens.max_local,
            layer=layer,
            causal_seqs=lens.global_kv,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(
            raw_out, lse, lens.rank_local, layer, forward_batch.batch_size
        )


class CuteDslStashedLensMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Stashes the step's length buffers when metadata is (re)built, so the
    per-layer decode does not walk the metadata object."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._stash_dcp_lens(self.forward_decode_metadata)

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        bs = forward_batch.batch_size
        if bs in self.decode_cuda_graph_metadata:
            self._stash_dcp_lens(self.decode_cuda_graph_metadata[bs])

    def _stash_dcp_lens(self, metadata) -> None:
        if metadata is None:
            return
        self._dcp_global_lens = metadata.global_seq_lens_k
        self._dcp_local_lens = metadata.seq_lens_k

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
        page_lens = self._dcp_global_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=page_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=self._dcp_global_lens[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, self._dcp_local_lens[:bs], layer, bs)


class CuteDslStepStashMLABackend(_DcpQueryMixin, CuteDslMLABackend):
    """Stash variant that pages with the rank-local stash."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._stash_dcp_lens(self.forward_decode_metadata)

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        bs = forward_batch.batch_size
        if bs in self.decode_cuda_graph_metadata:
            self._stash_dcp_lens(self.decode_cuda_graph_metadata[bs])

    def _stash_dcp_lens(self, metadata) -> None:
        if metadata is None:
            return
        self._dcp_global_lens = metadata.global_seq_lens_k
        self._dcp_local_lens = metadata.seq_lens_k

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
        page_lens = self._dcp_local_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=page_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=self._dcp_global_lens[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._dcp_finish(raw_out, lse, page_lens, layer, bs)

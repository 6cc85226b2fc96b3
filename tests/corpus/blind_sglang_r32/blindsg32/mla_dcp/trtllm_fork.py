"""Forked TRTLLM MLA backend (trtllm-gen kernels) with DCP.

The trtllm-gen decode kernel has no in-kernel DCP support: a q_len == 1
decode only needs this rank's KV lengths and page table, and every
multi-token DCP query must either carry the global causal bound (cute-dsl)
or be refused.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import (
    concat_mla_absorb_q_general,
    mla_quantize_without_rope_for_fp8,
)
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg32.mla_dcp.dcp_math import DcpShard, KvLens, split_kv_lens
from blindsg32.mla_dcp.launch import MLAKernelDims

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class _ForkLaunchHelpers:
    """Shared helpers of the forked trtllm_mla backends (mixed in before
    ``TRTLLMMLABackend``)."""

    @property
    def shard(self) -> DcpShard:
        return DcpShard.current()

    def _kv_cache_for(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata_for(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _max_seq_for(self, forward_batch: ForwardBatch) -> int:
        if forward_batch.seq_lens_cpu is not None:
            return int(forward_batch.seq_lens_cpu.max().item())
        return self.max_context_len


class ForkTRTLLMMLABackend(_ForkLaunchHelpers, TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: "ModelRunner",
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf, backend=backend
        )
        self.dims = MLAKernelDims.from_backend(self)

    @classmethod
    def for_draft(cls, model_runner: "ModelRunner", kv_indptr_buf: torch.Tensor, q_indptr_decode_buf: torch.Tensor):
        return cls(model_runner, True, kv_indptr_buf, q_indptr_decode_buf)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata decode branch; rebuilt decode metadata stores the whole lengths in seq_lens_k, which _forward_decode_dcp reads as rank-local
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        max_seq = self._max_seq_for(forward_batch)
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=block_kv_indices,
            seq_lens_k=seq_lens.to(torch.int32),
            max_seq_len_k=self._get_dcp_local_max_seq_len(max_seq),
        )
        metadata.global_seq_lens_k = metadata.seq_lens_k
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py _apply_cuda_graph_metadata / _apply_dcp_cuda_graph_metadata; decode replay fast path copies the whole seq_lens into the static seq_lens_k buffer under DCP
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: Any,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        if forward_mode.is_decode_or_idle() and get_parallel().dcp_enabled:
            # One copy into the capture-stable buffer; the page table is
            # rebuilt over this rank's cyclic slice.
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                req_pool_indices[:bs],
                self._get_dcp_local_seq_lens(seq_lens[:bs]),
            )
            return
        return super()._apply_cuda_graph_metadata(
            plan, bs, req_pool_indices, seq_lens, forward_mode
        )

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend target-verify DCP branch; calls trtllm-gen directly with a (bs, draft_token_num) query and rank-local lengths, no causal_seqlens_kv_global and no refusal
    # expect: SG203
    def _forward_verify_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim).to(
            self.data_type
        )
        local_lens = self._get_dcp_local_seq_lens(
            forward_batch.seq_lens[:bs] + draft_token_num
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_lens, self._dense_q_indptr(bs, draft_token_num), draft_token_num
        )
        return output.flatten(1), lse

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel DCP refusal; draft-extend launch raises NotImplementedError under DCP, otherwise whole lengths are this rank's
    # expect: clean
    def _forward_draft_extend_dcp(
        self, q: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen cannot take a global causal bound; a DCP draft "
                "extend needs the cutedsl_mla backend"
            )
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim).to(
            self.data_type
        )
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; lengths come back from split_kv_lens as a (global, local) tuple but are unpacked as (local, global)
    # expect: SG203
    def _launch_split_lens(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        local_lens, global_lens = split_kv_lens(forward_batch.seq_lens[:bs], self.shard)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(self._max_seq_for(forward_batch)),
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; split_kv_lens tuple unpacked in its documented (global, local) order, the kernel gets the local share
    # expect: clean
    def _launch_split_lens_ordered(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens, local_lens = split_kv_lens(forward_batch.seq_lens[:bs], self.shard)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(self._max_seq_for(forward_batch)),
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; lengths carried in the KvLens dataclass, kernel gets lens.local and lens.max_local
    # expect: clean
    def _launch_kv_lens(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        lens = KvLens.of(forward_batch.seq_lens[:bs], self._max_seq_for(forward_batch), self.shard)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=lens.max_local,
            layer=layer,
            return_lse=True,
        )
        fixup_zero_kv_rows(
            raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            lse.view(-1, layer.tp_q_head_num),
            lens.local,
            self.q_indptr_decode[: bs + 1],
            1,
        )
        return raw_out, lse


class LocalLensTRTLLMMLABackend(_ForkLaunchHelpers, TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode + _forward_decode_dcp; DCP decode recomputes rank-local lengths from forward_batch.seq_lens before the kernel
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
        if not self.shard.enabled or q_rope is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_pe).unsqueeze(1)
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        local_lens = self.shard.localize(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class Fp8TRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode fp8 branch; fp8 query path hands forward_batch.seq_lens straight to _run_decode_kernel (return_lse under DCP)
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
        if self.data_type != torch.float8_e4m3fn or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        q, k, k_rope = mla_quantize_without_rope_for_fp8(
            q, q_rope, k.squeeze(1), k_rope.squeeze(1)
        )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim).unsqueeze(1)
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        dcp = get_parallel().dcp_enabled
        result = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache_for(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = result
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
                -1, layer.tp_q_head_num
            )
        return result.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class AttrTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches the step's KV lengths on the backend for the per-layer decode."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        self._last_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._last_bs = bs

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; per-layer decode reads the lengths cached in self._last_seq_lens (whole) as this rank's under DCP
    # expect: SG203
    def _decode_from_attr(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_row_view(k_cache, self.page_size).unsqueeze(1),
            block_tables=metadata.block_kv_indices,
            seq_lens=self._last_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class LocalAttrTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches this rank's KV lengths (and the global ones) per step."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        self._last_global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._last_local_lens = self._get_dcp_local_seq_lens(self._last_global_lens)

    # idiom: layers/attention/trtllm_mla_backend.py _forward_decode_dcp; per-layer decode reads the rank-local lengths cached in self._last_local_lens
    # expect: clean
    def _decode_from_attr(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_row_view(k_cache, self.page_size).unsqueeze(1),
            block_tables=metadata.block_kv_indices,
            seq_lens=self._last_local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse


class InheritedLensTRTLLMMLABackend(TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens / _get_dcp_local_max_seq_len; decode relies on the inherited DCP helpers for lengths and bound
    # expect: clean
    def _decode_rank_local(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item())
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return self._run_decode_kernel(
            query=query,
            kv_cache=paged_row_view(k_cache, self.page_size).unsqueeze(1),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )


class DcpOffTRTLLMMLABackend(TRTLLMMLABackend):
    """Draft-model backend for replicas that never shard KV (dcp_size == 1)."""

    def __init__(self, model_runner: "ModelRunner", *args: Any, **kwargs: Any):
        if get_parallel().dcp_enabled:
            raise ValueError(
                "DcpOffTRTLLMMLABackend requires --dcp-size 1; use the cutedsl_mla fork"
            )
        super().__init__(model_runner, *args, **kwargs)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode; the class refuses DCP at construction, so forward_batch.seq_lens are this rank's lengths
    # expect: clean
    def forward_decode_fast(
        self, query: torch.Tensor, layer: "RadixAttention", forward_batch: ForwardBatch
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=paged_row_view(k_cache, self.page_size).unsqueeze(1),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

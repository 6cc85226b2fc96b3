"""trtllm-gen MLA decode backend variants for DCP deployments.

``VendorTrtllmGenMLABackend`` keeps SGLang's metadata building and swaps the
decode launch for the shared ``dcp_utils`` launcher; the subclasses each
override one method for a specific kernel/deployment combination.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg29.accel import dcp_utils
from blindsg29.accel.dcp_utils import DcpLens, MlaDims
from blindsg29.config import get_vendor_flags

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class MlaDecodeHelpersMixin:
    """Query/KV preparation shared by the vendor MLA decode backends."""

    @property
    def mla_dims(self) -> MlaDims:
        return MlaDims(self.qk_nope_head_dim, self.kv_lora_rank, self.qk_rope_head_dim)

    @property
    def flags(self):
        return get_vendor_flags()

    def _decode_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
            query = concat_mla_absorb_q_general(q_nope, q_pe)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _decode_metadata(self, forward_batch) -> TRTLLMMLADecodeMetadata:
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        planned_bs = getattr(metadata, "batch_size", None)
        if planned_bs is not None and planned_bs < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _finish_dcp(self, raw_out, lse, layer, local_lens, bs: int, q_len: int = 1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = torch.arange(
            0, (bs + 1) * q_len, q_len, dtype=torch.int32, device=output.device
        )
        fixup_zero_kv_rows(output, lse, local_lens, q_indptr, q_len)
        return output.flatten(1), lse


class VendorTrtllmGenMLABackend(MlaDecodeHelpersMixin, TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: "ModelRunner",
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self._dcp_lens: Optional[DcpLens] = None

    # idiom: trtllm_mla_backend.TRTLLMMLABackend.init_forward_metadata, extended to cache the (local, global) DcpLens pair after the base builds seq_lens_k / global_seq_lens_k
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        if not (
            mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            self._dcp_lens = None
            return
        metadata = self.forward_decode_metadata
        if metadata is None or metadata.seq_lens_k is None:
            self._dcp_lens = None
            return
        global_lens = (
            metadata.global_seq_lens_k
            if metadata.global_seq_lens_k is not None
            else metadata.seq_lens_k
        )
        self._dcp_lens = DcpLens(metadata.seq_lens_k, global_lens)

    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel as a thin method over dcp_utils.launch_mla_decode (lengths taken as given)
    # expect: clean
    def _launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        return_lse: bool = False,
    ):
        counter = (
            self._multi_ctas_kv_counter_buffer if self.backend == "trtllm-gen" else None
        )
        return dcp_utils.launch_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            block_tables,
            seq_lens,
            max_seq_len,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend=self.backend,
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=counter,
        )

    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_decode / _forward_decode_dcp, rank-local lengths recomputed through dcp_utils.local_kv_lens
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        dcp = get_parallel().dcp_enabled
        if dcp and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if not dcp:
            kv_lens = (
                metadata.seq_lens_k
                if metadata.seq_lens_k is not None
                else forward_batch.seq_lens
            )
            raw = self._launch(
                query, kv_cache, metadata.block_kv_indices, kv_lens,
                metadata.max_seq_len_k, layer,
            )
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        local_lens = dcp_utils.local_kv_lens(forward_batch.seq_lens[:bs])
        raw, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, local_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_dcp(raw, lse, layer, local_lens, bs)


class RawLensTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, handing the batch's seq_lens to the shared launcher (page table already rank-local)
    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        dcp = get_parallel().dcp_enabled
        if dcp and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # block_kv_indices lists only this rank's pages under DCP, so the
        # kernel cannot step outside the shard; feed the raw lengths.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if not dcp:
            raw = self._launch(
                query, kv_cache, metadata.block_kv_indices, kv_lens,
                metadata.max_seq_len_k, layer,
            )
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw, lse = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=True,
        )
        return self._finish_dcp(raw, lse, layer, metadata.seq_lens_k[:bs], bs)


class HoistedLensTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend hoisted int32 lens (seq_lens_k / global_seq_lens_k), choosing the hoisted copy by flag with a ternary
    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        dcp = get_parallel().dcp_enabled
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        use_hoisted = self.flags.mla_hoist_lens and metadata.global_seq_lens_k is not None
        kv_lens = metadata.global_seq_lens_k if use_hoisted else metadata.seq_lens_k
        raw = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp,
        )
        if not dcp:
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = raw
        return self._finish_dcp(raw_out, lse, layer, metadata.seq_lens_k[:bs], bs)


class VerifyTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend target-verify DCP branch, launching the decode entry directly with the rank-local seq_lens_k
    # expect: SG203
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not (
            forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return self._finish_dcp(raw_out, lse, layer, metadata.seq_lens_k, bs, q_len=ndt)


class PdlTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel hook overridden to always launch trtllm-gen (LSE forced on under DCP for the merge)
    # expect: SG203
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        if get_parallel().dcp_enabled:
            # The cross-rank merge always needs the rank-local LSE.
            return_lse = True
        return dcp_utils.launch_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            block_tables,
            seq_lens,
            max_seq_len,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class StrictTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel hook re-implemented, keeping the refusal of multi-token / causal-bound queries under DCP
    # expect: clean
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled:
            if q_len > 1 or causal_seqs is not None:
                raise NotImplementedError(
                    "trtllm-gen has no global causal bound; run speculative "
                    "DCP batches on the cute-dsl backend"
                )
            return_lse = True
        return dcp_utils.launch_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            block_tables,
            seq_lens,
            max_seq_len,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class RefusingVerifyTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend guarded to refuse target-verify / draft-extend under DCP before any launch
    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            raise NotImplementedError(
                "speculative MLA decode under DCP requires a kernel that takes "
                "causal_seqlens_kv_global"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class NonDcpFastTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_decode fast path on the batch's seq_lens, taken only when DCP is off (DCP defers to the parent)
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if get_parallel().dcp_enabled or not self.flags.mla_fast_decode_lens:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = self._decode_metadata(forward_batch)
        raw = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            forward_batch.seq_lens,
            metadata.max_seq_len_k,
            layer,
        )
        return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class ChainSpecTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: npu ascend_backend._get_kv_lens_and_block_tables (get_dcp_chain_spec_lens + repeat_interleave), target-verify flattened into one-token rows with per-token local frontiers
    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        info = dcp_utils.dcp_rank_info()
        if not (forward_batch.forward_mode.is_target_verify() and info.enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        spec_info = forward_batch.spec_info
        if getattr(spec_info, "topk", 1) != 1:
            raise NotImplementedError("per-token DCP verify needs a chain draft")
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = spec_info.draft_token_num
        total_kv = forward_batch.seq_lens[:bs] + ndt
        row_lens = get_dcp_chain_spec_lens(total_kv, ndt, info.size, info.rank)
        block_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        query = query.view(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        raw, lse = self._launch(
            query.to(self.data_type),
            kv_cache,
            block_tables,
            row_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_dcp(raw, lse, layer, row_lens, bs * ndt)


class RaggedPrefillTrtllmMLABackend(VendorTrtllmGenMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend ragged prefill (_run_prefill_kernel) for prefix-free extends, over this pass's own K/V
    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        mode = forward_batch.forward_mode
        meta = self.forward_prefill_metadata
        if (
            mode.is_target_verify()
            or mode.is_draft_extend_v2()
            or meta is None
            or meta.fallback_to_flashinfer_impl
            or any(forward_batch.extend_prefix_lens_cpu)
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if k_rope is not None:
            k = torch.cat([k, k_rope], dim=-1)
        q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        k = k.view(-1, layer.tp_k_head_num, layer.head_dim)
        v = v.view(-1, layer.tp_k_head_num, layer.v_head_dim)
        out = torch.empty(
            (q.shape[0], layer.tp_q_head_num, layer.v_head_dim),
            dtype=q.dtype,
            device=q.device,
        )
        out = self._run_prefill_kernel(
            q, k, v, layer,
            batch_size=forward_batch.batch_size,
            cum_seq_lens_q=meta.cum_seq_lens,
            max_q_len=meta.max_seq_len,
            seq_lens_kv=meta.seq_lens,
            cum_seq_lens_kv=meta.cum_seq_lens,
            max_kv_len=meta.max_seq_len,
            is_causal=True,
            return_lse=False,
            out_buffer=out,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) decode under DCP.

Our pool is static (no v2p), so the upstream pack_read_stream detour is
replaced by a direct req_to_token gather.
"""

from __future__ import annotations


import torch

from sglang.kernels.ops.attention.kv_indices import create_flashinfer_kv_indices_triton
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


def _gather_kv_indices(req_to_token, req_pool_indices, kv_lens, kv_indptr, total):
    bs = kv_lens.shape[0]
    kv_indices = torch.empty(total, dtype=torch.int32, device=kv_lens.device)
    create_flashinfer_kv_indices_triton[(bs,)](
        req_to_token,
        req_pool_indices,
        kv_lens,
        kv_indptr,
        None,
        kv_indices,
        req_to_token.stride(0),
    )
    return kv_indices


class StaticPoolMLAUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan=None,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        translator = self.attn_backend.kv_index_translator
        kv_indices = _gather_kv_indices(
            self.attn_backend.req_to_token_pool.req_to_token,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr,
            paged_kernel_lens_sum,
        )
        if get_parallel().dcp_enabled:
            # Keep this rank's share, then collapse widened ids to rows.
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class CompactMLAUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan=None,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        translator = self.attn_backend.kv_index_translator
        kv_indices = _gather_kv_indices(
            self.attn_backend.req_to_token_pool.req_to_token,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr,
            paged_kernel_lens_sum,
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to per-rank values in place and
            # compacts this rank's ids to the front of kv_indices.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
            kv_indices = translator.translate_dcp_read_ids(kv_indices[:n_local])
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


def _run_mla(wrapper, q_nope, q_rope, k_buffer, layer, return_lse):
    return wrapper.run(
        q_nope,
        q_rope,
        k_buffer[:, :, : layer.v_head_dim],
        k_buffer[:, :, layer.v_head_dim :],
        out=q_nope.new_empty(q_nope.shape),
        return_lse=return_lse,
    )


# expect: SG203
def mla_decode_dcp_direct(
    backend: FlashInferMLAAttnBackend,
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    """One-shot plan + run for the PD decode side (no metadata reuse)."""
    updater = backend.indices_updater_decode
    bs = forward_batch.batch_size
    kv_len_arr = forward_batch.seq_lens[:bs].to(torch.int32)
    kv_indptr = backend.kv_indptr[: bs + 1]
    kv_indptr[1:] = torch.cumsum(kv_len_arr, dim=0)
    kv_indices = _gather_kv_indices(
        backend.req_to_token_pool.req_to_token,
        forward_batch.req_pool_indices,
        kv_len_arr,
        kv_indptr,
        int(forward_batch.seq_lens_sum),
    )
    kv_indices = backend.kv_index_translator.translate_dcp_read_ids(
        filter_dcp_local_kv_indices(kv_indices)
    )
    backend.decode_wrapper.plan(
        backend.q_indptr_decode[: bs + 1],
        kv_indptr,
        kv_indices,
        kv_len_arr,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )
    k_buffer = backend.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q_nope.dtype)
    return _run_mla(
        backend.decode_wrapper, q_nope, q_rope, k_buffer, layer,
        return_lse=get_parallel().dcp_enabled,
    )


# expect: clean
def mla_decode_dcp_oneshot(
    backend: FlashInferMLAAttnBackend,
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    updater = backend.indices_updater_decode
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    global_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=global_lens.device)
    global_indptr[1:] = torch.cumsum(global_lens, dim=0)
    kv_indices = _gather_kv_indices(
        backend.req_to_token_pool.req_to_token,
        forward_batch.req_pool_indices,
        global_lens,
        global_indptr,
        int(forward_batch.seq_lens_sum),
    )
    kv_indices = backend.kv_index_translator.translate_dcp_read_ids(
        filter_dcp_local_kv_indices(kv_indices)
    )
    # Lengths / indptr of this rank's slice, matching the filtered ids.
    kv_len_arr = global_lens.clone()
    update_local_kv_lens_for_dcp(kv_len_arr)
    kv_indptr = backend.kv_indptr[: bs + 1]
    kv_indptr[1:] = torch.cumsum(kv_len_arr, dim=0)
    backend.decode_wrapper.plan(
        backend.q_indptr_decode[: bs + 1],
        kv_indptr,
        kv_indices,
        kv_len_arr,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )
    k_buffer = backend.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q_nope.dtype)
    return _run_mla(
        backend.decode_wrapper, q_nope, q_rope, k_buffer, layer,
        return_lse=get_parallel().dcp_enabled,
    )

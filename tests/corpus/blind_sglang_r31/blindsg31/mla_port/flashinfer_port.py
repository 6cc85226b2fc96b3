"""FlashInfer MLA wrapper planning for the ROCm build.

FlashInfer's ``BatchMLAPagedAttentionWrapper.plan`` takes the KV CSR
(``kv_indptr`` / ``kv_indices``) and ``kv_len_arr``; under DCP all three must
describe this rank's share. The port re-implements the decode / verify index
updaters on top of a HIP-built FlashInfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.kv_indices import create_flashinfer_kv_indices_triton
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel

from blindsg31.mla_port import kernel_shim

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _fill_kv_indices(req_to_token, req_pool_indices, lens, kv_indptr, total: int):
    kv_indices = torch.empty(total, dtype=torch.int32, device=lens.device)
    create_flashinfer_kv_indices_triton[(lens.shape[0],)](
        req_to_token,
        req_pool_indices,
        lens,
        kv_indptr,
        None,
        kv_indices,
        req_to_token.stride(0),
    )
    return kv_indices


class RocmMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode planning without the KV-index translator."""

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward; plans the MLA wrapper from paged_kernel_lens with no DCP sharding
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
        kv_indices = _fill_kv_indices(
            self.attn_backend.req_to_token,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr,
            paged_kernel_lens_sum,
        )
        # num_local_heads already counts the DCP-gathered query heads.
        kernel_shim.fi_mla_plan(
            wrapper,
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class RocmMLAIndicesUpdaterDecodeDCP(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode planning that shards the KV CSR for DCP."""

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward + dcp/planner.py plan_dcp_decode_metadata; shards lens/indptr/indices before plan
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
        kv_indices = _fill_kv_indices(
            self.attn_backend.req_to_token,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr,
            paged_kernel_lens_sum,
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr in place to this rank's share and
            # compacts this rank's ids to the front of kv_indices.
            plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        kernel_shim.fi_mla_plan(
            wrapper,
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward; filters kv_indices to this rank but plans kv_len_arr / kv_indptr from the whole lengths
    # expect: SG203
    def plan_local_indices_only(
        self,
        wrapper,
        seq_lens: torch.Tensor,
        req_pool_indices: torch.Tensor,
        q_indptr: torch.Tensor,
    ):
        bs = seq_lens.shape[0]
        kv_indptr = kernel_shim.csr_from_lens(seq_lens)
        kv_indices = _fill_kv_indices(
            self.attn_backend.req_to_token,
            req_pool_indices,
            seq_lens,
            kv_indptr,
            int(seq_lens.sum().item()),
        )
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


# idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (target verify); plans the verify wrapper causal with kv_len_arr = seq_lens + draft tokens
# expect: SG203
def plan_verify_wrapper(updater, wrapper, forward_batch: "ForwardBatch", kv_indices: torch.Tensor):
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    qo_indptr = torch.arange(
        0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=kv_lens.device
    )
    kernel_shim.fi_mla_plan(
        wrapper,
        qo_indptr,
        kernel_shim.csr_from_lens(kv_lens),
        kv_indices,
        kv_lens,
        num_heads=updater.num_local_heads,
        kv_lora_rank=updater.kv_lora_rank,
        qk_rope_head_dim=updater.qk_rope_head_dim,
        causal=True,
        sm_scale=updater.scaling,
        q_data_type=updater.q_data_type,
        kv_data_type=updater.data_type,
    )


# idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (target verify); refuses DCP (the MLA wrapper has no global causal bound), else plans the verify wrapper
# expect: clean
def plan_verify_wrapper_guarded(updater, wrapper, forward_batch: "ForwardBatch", kv_indices: torch.Tensor):
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "FlashInfer MLA verify under DCP needs a global causal bound; "
            "use the cute-dsl verify launcher"
        )
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    qo_indptr = torch.arange(
        0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=kv_lens.device
    )
    kernel_shim.fi_mla_plan(
        wrapper,
        qo_indptr,
        kernel_shim.csr_from_lens(kv_lens),
        kv_indices,
        kv_lens,
        num_heads=updater.num_local_heads,
        kv_lora_rank=updater.kv_lora_rank,
        qk_rope_head_dim=updater.qk_rope_head_dim,
        causal=True,
        sm_scale=updater.scaling,
        q_data_type=updater.q_data_type,
        kv_data_type=updater.data_type,
    )


# idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode); host kv_len_arr localized with update_local_kv_lens_for_dcp before the indptr cumsum and the plan
# expect: clean
def plan_decode_from_host(updater, wrapper, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor, bs: int, fast_kwargs: dict):
    kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    kv_indptr_cpu = fast_kwargs["kv_indptr_cpu"][: bs + 1]
    kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
    wrapper.plan(
        fast_kwargs["qo_indptr_cpu"][: bs + 1],
        kv_indptr_cpu,
        kv_indices,
        kv_len_arr_cpu,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )


# idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode); indptr cumsum taken from the whole host lengths before update_local_kv_lens_for_dcp
# expect: SG203
def plan_decode_from_host_reordered(updater, wrapper, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor, bs: int, fast_kwargs: dict):
    kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
    kv_indptr_cpu = fast_kwargs["kv_indptr_cpu"][: bs + 1]
    kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    wrapper.plan(
        fast_kwargs["qo_indptr_cpu"][: bs + 1],
        kv_indptr_cpu,
        kv_indices,
        kv_len_arr_cpu,
        updater.num_local_heads,
        updater.kv_lora_rank,
        updater.qk_rope_head_dim,
        1,
        False,
        updater.scaling,
        updater.data_type,
        updater.data_type,
    )

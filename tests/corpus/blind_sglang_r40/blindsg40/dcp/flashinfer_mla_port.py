"""DCP port of the FlashInfer-MLA backend (``BatchMLAPagedAttentionWrapper.plan``).

The MLA wrapper's plan has no global causal bound, so under DCP only
single-token decode can be planned on a rank-local KV shard.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import DcpSettings
from blindsg40.dcp.lens import to_local
from blindsg40.registry.core import register_dcp_backend


class _DcpUpdaterBase(FlashInferMLAIndicesUpdaterDecode):
    def __init__(self, model_runner, attn_backend, dcp: DcpSettings):
        super().__init__(model_runner, attn_backend)
        self.dcp = dcp

    def _virtual_stream(self, plan, req_pool_indices, paged_kernel_lens, kv_indptr, total):
        kv_indices = torch.empty(total, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    def _plan(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens, causal=False):
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            causal,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class FilteredDcpUpdater(_DcpUpdaterBase):
    # expect: SG203
    def call_begin_forward(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._virtual_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if self.dcp.enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, paged_kernel_lens.to(torch.int32))


class PlannedDcpUpdater(_DcpUpdaterBase):
    # expect: clean
    def call_begin_forward(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._virtual_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if self.dcp.enabled:
            # Rewrites kv_lens / kv_indptr to this rank's lengths and compacts
            # this rank's ids to the front of kv_indices.
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class PrelocalizedDcpUpdater(_DcpUpdaterBase):
    # expect: SG203
    def call_begin_forward(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._virtual_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if self.dcp.enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs)
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class GatedDcpUpdater(_DcpUpdaterBase):
    # expect: clean
    def call_begin_forward(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs,
    ):
        if self.dcp.enabled or spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._virtual_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        self._plan(wrapper, q_indptr[: bs + 1], kv_indptr, kv_indices, paged_kernel_lens.to(torch.int32))


class DcpFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, dcp: DcpSettings, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.dcp = dcp
        self._kv_len_by_mode: Dict[ForwardMode, torch.Tensor] = {}

    @classmethod
    def from_server_args(cls, server_args, model_runner, **kwargs):
        return cls(model_runner, DcpSettings.from_server_args(server_args), **kwargs)

    def _verify_indices(self, forward_batch: ForwardBatch, kv_lens: torch.Tensor):
        bs = forward_batch.batch_size
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(kv_lens.sum().item()), dtype=torch.int32, device=kv_lens.device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return filter_dcp_local_kv_indices(kv_indices)

    def _plan_verify(self, forward_batch, qo_indptr, kv_indptr, kv_indices, kv_lens):
        updater = self.indices_updater_decode
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            True,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class DcpFlashInferMLAVerifyBackend(DcpFlashInferMLABackend):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (self.dcp.enabled and forward_batch.forward_mode.is_target_verify()):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=self.device)
        global_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        kv_indices = self._verify_indices(forward_batch, global_lens)
        local_lens = to_local(global_lens, self.dcp)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)
        kv_indptr[1:] = torch.cumsum(local_lens, dim=0)
        self._plan_verify(forward_batch, qo_indptr, kv_indptr, kv_indices, local_lens)


class DcpFlashInferMLARefusingBackend(DcpFlashInferMLABackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if self.dcp.enabled and (mode.is_target_verify() or mode.is_draft_extend_v2()):
            raise NotImplementedError(
                "FlashInfer-MLA cannot bound a multi-token query by the global KV "
                "length on a rank-local shard; DCP speculative runs need cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)


class DcpFlashInferMLAGraphBackend(DcpFlashInferMLABackend):
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
        spec_info, seq_lens_cpu, in_capture=False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


class DcpFlashInferMLAGraphBackendLocal(DcpFlashInferMLABackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
        spec_info, seq_lens_cpu, in_capture=False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


class DcpFlashInferMLAModeTable(DcpFlashInferMLABackend):
    def record_lens(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._kv_len_by_mode[ForwardMode.DECODE] = to_local(global_lens, self.dcp)
        if forward_batch.spec_info is not None:
            ndt = forward_batch.spec_info.draft_token_num
            self._kv_len_by_mode[ForwardMode.TARGET_VERIFY] = global_lens + ndt

    # expect: SG203
    def plan_verify_from_table(self, forward_batch: ForwardBatch):
        self.record_lens(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kv_lens = self._kv_len_by_mode[ForwardMode.TARGET_VERIFY]
        kv_indices = self._verify_indices(forward_batch, kv_lens)
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=self.device)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        self._plan_verify(forward_batch, qo_indptr, kv_indptr, kv_indices, kv_lens)

    # expect: clean
    def plan_verify_dcp_off(self, forward_batch: ForwardBatch):
        if self.dcp.enabled:
            raise NotImplementedError("FlashInfer-MLA verify is not served under DCP")
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(kv_lens.sum().item()), dtype=torch.int32, device=self.device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=self.device)
        self._plan_verify(forward_batch, qo_indptr, kv_indptr, kv_indices, kv_lens)


@register_dcp_backend("flashinfer_mla")
def create_flashinfer_mla_dcp(server_args, model_runner):
    return DcpFlashInferMLARefusingBackend.from_server_args(server_args, model_runner)

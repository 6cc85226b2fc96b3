"""FlashInfer MLA wrapper (``BatchMLAPagedAttentionWrapper``) under DCP.

Fork-side overrides of the FlashInfer-MLA indices updaters and the
CUDA-graph replay path; the wrapper ``plan`` is the legacy flat-metadata
form (qo_indptr, kv_indptr, kv_indices, kv_len_arr, ...) that SGLang uses.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAMultiStepDraftBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class _EagerDecodePlanMixin:
    def _pack_virtual_indices(self, plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr):
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    def _plan(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens):
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


class FilteredIndicesUpdaterDecode(_EagerDecodePlanMixin, FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        if init_metadata_replay or spec_info is not None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr
        )
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                kv_indices
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class ShardedIndicesUpdaterDecode(_EagerDecodePlanMixin, FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        if init_metadata_replay or spec_info is not None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_virtual_indices(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr
        )
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
            local = kv_indices[:n_local]
            local.copy_(self.attn_backend.kv_index_translator.translate_dcp_read_ids(local))
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class ForkFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Graph replay + target-verify planning overrides."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode branch)
    # expect: SG203
    def _replay_decode_metadata(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, spec_info, seq_lens_cpu):
        assert seq_lens_cpu is not None
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode branch)
    # expect: clean
    def _replay_decode_metadata_v2(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, spec_info, seq_lens_cpu):
        assert seq_lens_cpu is not None
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target_verify branch)
    # expect: SG203
    def plan_target_verify(self, forward_batch: ForwardBatch):
        self.indices_updater_prefill.update(
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            prefix_lens=None,
            prefill_wrapper_paged=self.prefill_wrapper_verify,
            use_ragged=False,
            spec_info=forward_batch.spec_info,
            plan=forward_batch.kv_loc_plan,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target_verify branch)
    # expect: clean
    def plan_target_verify_v2(self, forward_batch: ForwardBatch):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla cannot pass a global causal bound to the MLA "
                "wrapper; DCP speculative verify needs cutedsl_mla"
            )
        self.indices_updater_prefill.update(
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            prefix_lens=None,
            prefill_wrapper_paged=self.prefill_wrapper_verify,
            use_ragged=False,
            spec_info=forward_batch.spec_info,
            plan=forward_batch.kv_loc_plan,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    def _wrapper_plan_args(self):
        upd = self.indices_updater_decode
        return (
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            False,
            upd.scaling,
            upd.data_type,
            upd.data_type,
        )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py fast_mla_decode_plan (graph replay)
    # expect: SG203
    def replay_decode_plan(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        wrapper = self.decode_cuda_graph_metadata[bs]

        def _host_lens() -> torch.Tensor:
            return seq_lens_cpu[:bs].to(torch.int32)

        kv_len_arr_cpu = _host_lens()
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            *self._wrapper_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(wrapper)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py fast_mla_decode_plan (graph replay)
    # expect: clean
    def replay_decode_plan_host(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        wrapper = self.decode_cuda_graph_metadata[bs]
        parallel = get_parallel()

        def _host_lens() -> torch.Tensor:
            lens = seq_lens_cpu[:bs].to(torch.int32)
            if parallel.dcp_enabled:
                lens = get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank)
            return lens

        kv_len_arr_cpu = _host_lens()
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            *self._wrapper_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(wrapper)


class ForkFlashInferMLAMultiStepDraftBackend(FlashInferMLAMultiStepDraftBackend):
    """Plans every draft step's wrapper directly (no per-step clone)."""

    def _step_indices(self, forward_batch: ForwardBatch, kv_lens, kv_indptr):
        kv_indices = torch.empty(
            int(kv_lens.sum().item()), dtype=torch.int32, device=kv_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata
    # expect: SG203
    def plan_draft_steps(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            upd = backend.indices_updater_decode
            kv_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            kv_indptr = self.kv_indptr[i, : bs + 1]
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = self._step_indices(forward_batch, kv_lens, kv_indptr)
            backend.decode_wrapper.plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                kv_lens,
                upd.num_local_heads,
                upd.kv_lora_rank,
                upd.qk_rope_head_dim,
                1,
                False,
                upd.scaling,
                upd.data_type,
                upd.data_type,
            )
            backend.forward_metadata = DecodeMetadata(backend.decode_wrapper)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata
    # expect: clean
    def plan_draft_steps_v2(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        dcp_enabled = get_parallel().dcp_enabled
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            upd = backend.indices_updater_decode
            kv_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            kv_indptr = self.kv_indptr[i, : bs + 1]
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = self._step_indices(forward_batch, kv_lens, kv_indptr)
            if dcp_enabled:
                plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            backend.decode_wrapper.plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                kv_lens,
                upd.num_local_heads,
                upd.kv_lora_rank,
                upd.qk_rope_head_dim,
                1,
                False,
                upd.scaling,
                upd.data_type,
                upd.data_type,
            )
            backend.forward_metadata = DecodeMetadata(backend.decode_wrapper)

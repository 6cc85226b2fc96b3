"""FlashInfer MLA planning overrides for DCP decode in this fork."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel


class _UpdaterBase(FlashInferMLAIndicesUpdaterDecode):
    def _fill_indices(self, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr, req_pool_indices, plan):
        bs = len(paged_kernel_lens)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices

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


class NoShardDecodeUpdater(_UpdaterBase):
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
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr, kv_indices = self._fill_indices(
            paged_kernel_lens, paged_kernel_lens_sum, kv_indptr, req_pool_indices, plan
        )
        if get_parallel().dcp_enabled:
            # pages are already rank-filtered by the translator in this fork
            kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                kv_indices
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class InPlaceShardDecodeUpdater(_UpdaterBase):
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
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr, kv_indices = self._fill_indices(
            paged_kernel_lens, paged_kernel_lens_sum, kv_indptr, req_pool_indices, plan
        )
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                kv_indices
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class PlannerShardDecodeUpdater(_UpdaterBase):
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
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr, kv_indices = self._fill_indices(
            paged_kernel_lens, paged_kernel_lens_sum, kv_indptr, req_pool_indices, plan
        )
        if get_parallel().dcp_enabled:
            # rewrites kv_lens / kv_indptr / kv_indices to this rank's shard
            plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class ReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Decode-only cuda-graph replay planning with a host length mirror."""

    # expect: SG203
    def replay_decode_plan(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            self.indices_updater_decode.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.indices_updater_decode.scaling,
            self.data_type,
            self.data_type,
        )

    # expect: clean
    def replay_decode_plan_sharded(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            self.indices_updater_decode.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.indices_updater_decode.scaling,
            self.data_type,
            self.data_type,
        )


class StepwiseDCPDraftBackend(FlashInferMLAMultiStepDraftBackend):
    """Plans each draft step's wrapper directly (topk == 1 chain)."""

    def _step_wrapper(self, i: int):
        return self.attn_backends[i].decode_wrapper

    # expect: SG203
    def plan_draft_steps(self, forward_batch: ForwardBatch, kv_indices_per_step):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self.init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        for i in range(self.speculative_num_steps - 1):
            step_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            kv_indptr = self.kv_indptr[i, : bs + 1]
            kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
            updater = self.attn_backends[i].indices_updater_decode
            self._step_wrapper(i).plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices_per_step[i],
                step_lens,
                updater.num_local_heads,
                updater.kv_lora_rank,
                updater.qk_rope_head_dim,
                1,
                False,
                updater.scaling,
                updater.data_type,
                updater.data_type,
            )

    # expect: clean
    def plan_draft_steps_sharded(self, forward_batch: ForwardBatch, kv_indices_per_step):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return self.init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        for i in range(self.speculative_num_steps - 1):
            step_lens = get_dcp_lens(
                forward_batch.seq_lens + (i + 1), parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
            kv_indptr = self.kv_indptr[i, : bs + 1]
            kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
            updater = self.attn_backends[i].indices_updater_decode
            self._step_wrapper(i).plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices_per_step[i],
                step_lens,
                updater.num_local_heads,
                updater.kv_lora_rank,
                updater.qk_rope_head_dim,
                1,
                False,
                updater.scaling,
                updater.data_type,
                updater.data_type,
            )

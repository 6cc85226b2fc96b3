"""flashinfer_mla fork: the BatchMLAPagedAttentionWrapper plans, rewritten.

The fork plans its wrappers itself (decode, cuda-graph replay, target verify,
multi-step draft) to drop the spec_info indirection it does not use.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAMultiStepDraftBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.spec_info import SpecInput

from flashinfer import BatchMLAPagedAttentionWrapper


class ForkMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode plan without the spec_info / replay branches."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (DCP: only the page list filtered to this rank)
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            # Keep this rank's pages only, then collapse them to physical ids.
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


class ForkDcpMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Same simplified decode plan, sharded with SGLang's DCP planner."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (layers/dcp/planner.py plan_dcp_decode_metadata rewrites lens, indptr and indices)
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share and compacts
            # this rank's ids into the head of kv_indices.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
            kv_indices[:n_local] = translator.translate_dcp_read_ids(
                kv_indices[:n_local]
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


class ForkFlashInferMLABackend(FlashInferMLAAttnBackend):
    """flashinfer_mla with the fork's replay and verify planning."""

    def _pack_graph_indices(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
    ) -> torch.Tensor:
        kv_indptr = self.cuda_graph_kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens[:bs], dim=0)
        self.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices[:bs],
            seq_lens=seq_lens[:bs],
            indptr=kv_indptr,
            out=self.cuda_graph_kv_indices,
        )
        return kv_indptr

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay, host-side fast plan arrays)
    # expect: SG203
    def replay_decode_plan(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
    ) -> None:
        updater = self.indices_updater_decode
        wrapper: BatchMLAPagedAttentionWrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = self.cuda_graph_kv_indptr_cpu[: bs + 1]
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        kv_indptr = self._pack_graph_indices(plan, bs, req_pool_indices, seq_lens)
        if get_parallel().dcp_enabled:
            kv_lens = seq_lens[:bs].to(torch.int32)
            plan_dcp_decode_metadata(
                kv_lens,
                kv_indptr,
                self.cuda_graph_kv_indices,
                True,
                {"kv_len_arr_cpu": kv_len_arr_cpu},
                bs,
            )
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
            self.cuda_graph_kv_indices,
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp on the host lens before the cumsum)
    # expect: clean
    def replay_decode_plan_local(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
    ) -> None:
        updater = self.indices_updater_decode
        wrapper: BatchMLAPagedAttentionWrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        kv_indptr_cpu = self.cuda_graph_kv_indptr_cpu[: bs + 1]
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        kv_indptr = self._pack_graph_indices(plan, bs, req_pool_indices, seq_lens)
        if get_parallel().dcp_enabled:
            kv_lens = seq_lens[:bs].to(torch.int32)
            plan_dcp_decode_metadata(
                kv_lens,
                kv_indptr,
                self.cuda_graph_kv_indices,
                True,
                {"kv_len_arr_cpu": kv_len_arr_cpu},
                bs,
            )
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
            self.cuda_graph_kv_indices,
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target_verify) + FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (attn_dcp_metadata page list)
    # expect: SG203
    def plan_verify(self, forward_batch: ForwardBatch) -> None:
        updater = self.indices_updater_prefill
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        device = forward_batch.seq_lens.device
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        qo_indptr = torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=device
        )
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum + bs * draft_token_num,
            dtype=torch.int32,
            device=device,
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        dcp_metadata = forward_batch.attn_dcp_metadata
        if get_parallel().dcp_enabled and dcp_metadata is not None:
            if dcp_metadata.dcp_kv_indices is not None:
                kv_indices = dcp_metadata.dcp_kv_indices
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
            updater.q_data_type,
            updater.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target_verify), DCP refused up front
    # expect: clean
    def plan_verify_refusing_dcp(self, forward_batch: ForwardBatch) -> None:
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla verify has no rank-local plan under DCP; "
                "use cutedsl_mla for DCP speculative decoding"
            )
        updater = self.indices_updater_prefill
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        device = forward_batch.seq_lens.device
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        qo_indptr = torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=device
        )
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum + bs * draft_token_num,
            dtype=torch.int32,
            device=device,
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
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
            updater.q_data_type,
            updater.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class ForkFlashInferMLAMultiStepDraftBackend(FlashInferMLAMultiStepDraftBackend):
    """Chain (topk == 1) multi-step draft: one decode wrapper per step."""

    attn_backends: list

    def _step_stream(
        self, forward_batch: ForwardBatch, step: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bs = forward_batch.batch_size
        kv_lens = (forward_batch.seq_lens + step + 1).to(torch.int32)
        kv_indptr = self.kv_indptr[step, : bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum + bs * (step + 1),
            dtype=torch.int32,
            device=forward_batch.seq_lens.device,
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_lens, kv_indptr, kv_indices

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.common_template (per-step decode wrappers list)
    # expect: SG203
    def plan_draft_steps(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        dcp_enabled = get_parallel().dcp_enabled
        for step in range(self.speculative_num_steps - 1):
            backend: FlashInferMLAAttnBackend = self.attn_backends[step]
            updater = backend.indices_updater_decode
            kv_lens, kv_indptr, kv_indices = self._step_stream(forward_batch, step)
            if dcp_enabled:
                kv_indices = backend.kv_index_translator.translate_dcp_read_ids(
                    filter_dcp_local_kv_indices(kv_indices)
                )
            backend.decode_wrapper.plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                kv_lens,
                updater.num_local_heads,
                updater.kv_lora_rank,
                updater.qk_rope_head_dim,
                1,
                False,
                updater.scaling,
                updater.data_type,
                updater.data_type,
            )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.common_template, each step sharded with layers/dcp/planner.py plan_dcp_decode_metadata
    # expect: clean
    def plan_draft_steps_sharded(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        dcp_enabled = get_parallel().dcp_enabled
        for step in range(self.speculative_num_steps - 1):
            backend: FlashInferMLAAttnBackend = self.attn_backends[step]
            updater = backend.indices_updater_decode
            kv_lens, kv_indptr, kv_indices = self._step_stream(forward_batch, step)
            if dcp_enabled:
                n_local = plan_dcp_decode_metadata(
                    kv_lens, kv_indptr, kv_indices, False, {}, bs
                )
                kv_indices[:n_local] = backend.kv_index_translator.translate_dcp_read_ids(
                    kv_indices[:n_local]
                )
            backend.decode_wrapper.plan(
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                kv_lens,
                updater.num_local_heads,
                updater.kv_lora_rank,
                updater.qk_rope_head_dim,
                1,
                False,
                updater.scaling,
                updater.data_type,
                updater.data_type,
            )

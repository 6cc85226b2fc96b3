# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) planning under DCP.

Decode under DCP: each rank plans the wrapper over its own cyclic slice of the
KV cache and the model merges the per-rank (out, lse) pairs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.speculative.spec_info import SpecInput

logger = logging.getLogger(__name__)


class TranslatingMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that packs the read stream and translates it in one pass."""

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
        if spec_info is None:
            kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
            kv_indptr = kv_indptr[: bs + 1]
            kv_indices = torch.empty(
                paged_kernel_lens_sum, dtype=torch.int32, device="cuda"
            )
            translator = self.attn_backend.kv_index_translator
            is_translated = translator.pack_read_stream(
                plan,
                req_pool_indices=req_pool_indices,
                seq_lens=paged_kernel_lens,
                indptr=kv_indptr,
                out=kv_indices,
            )
            if (
                get_parallel().dcp_enabled
                and not is_translated
                and translator.needs_read_translate
            ):
                kv_indices.copy_(translator.translate_dcp_read_ids(kv_indices))
        else:
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)

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


class ShardedMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
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
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla draft decode is not supported with DCP"
            )
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                q_indptr,
                kv_indptr,
                init_metadata_replay,
                spec_info,
                plan=plan,
                req_pool_indices=req_pool_indices,
                **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))

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

    # expect: SG203
    def plan_draft_step_translated(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        spec_info: SpecInput,
        bs: int,
    ) -> None:
        kv_indptr = spec_info.kv_indptr[: bs + 1]
        kv_indices = spec_info.kv_indices
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        translator = self.attn_backend.kv_index_translator
        if get_parallel().dcp_enabled and translator.needs_read_translate:
            kv_indices = translator.translate_dcp_read_ids(kv_indices)
        wrapper.plan(
            self.q_indptr[: bs + 1],
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

    # expect: clean
    def plan_draft_step(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        spec_info: SpecInput,
        bs: int,
    ) -> None:
        kv_indptr = spec_info.kv_indptr[: bs + 1].clone()
        kv_indices = spec_info.kv_indices.clone()
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        translator = self.attn_backend.kv_index_translator
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            if n_kernel_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_kernel_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        wrapper.plan(
            self.q_indptr[: bs + 1],
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


class ShardedFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA backend with a host-fed decode graph replay."""

    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
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


class HostPlannedFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA backend that plans verify / replay from host snapshots."""

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        fast_kwargs = dict(self.fast_decode_kwargs)
        fast_kwargs.update(
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=kv_len_arr_cpu,
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **fast_kwargs,
        )

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_target_verify():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        spec_info = forward_batch.spec_info
        draft_token_num = spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(
            torch.full_like(kv_lens, draft_token_num), dim=0
        )
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(kv_indptr[-1].item()), dtype=torch.int32, device="cuda")
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        updater = self.indices_updater_prefill
        num_heads = updater.num_local_heads
        if get_parallel().dcp_enabled:
            num_heads *= get_parallel().attn_dcp_size
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            True,
            updater.scaling,
            updater.q_data_type,
            updater.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class DecodeOnlyDcpFlashInferMLABackend(FlashInferMLAAttnBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            raise NotImplementedError(
                "flashinfer_mla speculative verify / draft extend is not supported "
                "with decode context parallel"
            )
        return super().init_forward_metadata(forward_batch)

    # expect: clean
    def plan_decode_direct(self, forward_batch: ForwardBatch) -> None:
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(global_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device="cuda"
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=global_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if parallel.dcp_enabled:
            kv_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
                torch.int32
            )
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        else:
            kv_lens = global_lens
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
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
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
    def plan_decode_rank_local(self, forward_batch: ForwardBatch) -> None:
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(global_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device="cuda"
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=global_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        kv_lens = global_lens
        if parallel.dcp_enabled and forward_batch.spec_info is None:
            kv_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
                torch.int32
            )
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
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
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

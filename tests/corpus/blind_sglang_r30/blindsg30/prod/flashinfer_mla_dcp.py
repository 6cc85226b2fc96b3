"""Production patches to the FlashInfer MLA backend's wrapper planning under DCP."""

from __future__ import annotations

import os
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
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg30.prod import mla_kernels as mk
from blindsg30.utils import dcp_lens as dl

if TYPE_CHECKING:
    from flashinfer import BatchMLAPagedAttentionWrapper

    from sglang.srt.mem_cache.kv_index_translator import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner


class StartupMLADecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    def __init__(self, model_runner: "ModelRunner", attn_backend):
        super().__init__(model_runner, attn_backend)
        self.impl = os.environ.get("STARTUP_FI_MLA_DECODE_PLAN", "sharded")
        self._impls = {
            "fast": self.call_begin_forward_fast,
            "sharded": self.call_begin_forward_sharded,
            "inplace": self.plan_inplace_local,
            "discarded": self.plan_discarded_local,
            "helper": self.plan_via_helper,
            "helper_local": self.plan_via_helper_local,
        }

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
        return self._impls[self.impl](
            wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
            plan=plan, req_pool_indices=req_pool_indices,
        )

    def _pack_virtual(self, plan, req_pool_indices, lens, lens_sum, indptr):
        kv_indices = torch.empty(lens_sum, dtype=torch.int32, device=lens.device)
        is_translated = self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=lens,
            indptr=indptr,
            out=kv_indices,
        )
        return kv_indices, is_translated

    def _local_ids(self, kv_indices: torch.Tensor, is_translated: bool) -> torch.Tensor:
        translator = self.attn_backend.kv_index_translator
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        if not is_translated and translator.needs_read_translate and kv_indices.numel():
            kv_indices = translator.translate_dcp_read_ids(kv_indices)
        return kv_indices

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward; ids filtered to this rank, kv_indptr/kv_lens left global
    # expect: SG203
    def call_begin_forward_fast(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr
        )
        if get_parallel().dcp_enabled:
            kv_indices = self._local_ids(kv_indices, is_translated)
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

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward; plan_dcp_decode_metadata rewrites kv_lens/kv_indptr in place first
    # expect: clean
    def call_begin_forward_sharded(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr
        )
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            translator = self.attn_backend.kv_index_translator
            if not is_translated and n_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_ids]
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

    # idiom: layers/dcp/layout.py update_local_kv_lens_for_dcp applied in place to a kv_lens copy, indptr rebuilt from it before plan
    # expect: clean
    def plan_inplace_local(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        virt_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=paged_kernel_lens.device)
        virt_indptr[1:] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, virt_indptr
        )
        kv_lens = paged_kernel_lens.to(torch.int32).clone()
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indices = self._local_ids(kv_indices, is_translated)
        kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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

    # idiom: layers/dcp/layout.py get_dcp_lens called as if in place (return value dropped), then kv_lens planned
    # expect: SG203
    def plan_discarded_local(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        parallel = get_parallel()
        virt_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=paged_kernel_lens.device)
        virt_indptr[1:] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, virt_indptr
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        if parallel.dcp_enabled:
            get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
            kv_indices = self._local_ids(kv_indices, is_translated)
        kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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

    # idiom: layers/attention/flashinfer_mla_backend.py call_begin_forward split into a generic plan helper; caller hands it paged_kernel_lens (global)
    # expect: SG203
    def plan_via_helper(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        virt_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=paged_kernel_lens.device)
        virt_indptr[1:] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, virt_indptr
        )
        if get_parallel().dcp_enabled:
            kv_indices = self._local_ids(kv_indices, is_translated)
        mk.plan_mla_decode_wrapper(
            wrapper,
            paged_kernel_lens,
            kv_indices,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )

    # idiom: layers/attention/flashinfer_mla_backend.py call_begin_forward split into a generic plan helper; caller localizes through dcp_lens.local_lens
    # expect: clean
    def plan_via_helper_local(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        *, plan, req_pool_indices,
    ):
        bs = len(paged_kernel_lens)
        virt_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=paged_kernel_lens.device)
        virt_indptr[1:] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices, is_translated = self._pack_virtual(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, virt_indptr
        )
        lens = paged_kernel_lens
        if get_parallel().dcp_enabled:
            kv_indices = self._local_ids(kv_indices, is_translated)
            lens = dl.local_lens(paged_kernel_lens)
        mk.plan_mla_decode_wrapper(
            wrapper,
            lens,
            kv_indices,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class StartupFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = StartupMLADecodeUpdater(model_runner, self)
        self.replay_impl = os.environ.get("STARTUP_FI_MLA_REPLAY", "local")

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            self.plan_verify_dcp(forward_batch)
            return
        super().init_forward_metadata(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch, in_capture: bool = False):
        if in_capture or not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        replay = (
            self.plan_replay_from_cpu
            if self.replay_impl == "cpu"
            else self.plan_replay_from_cpu_local
        )
        replay(forward_batch)
        self.forward_metadata = DecodeMetadata(
            self.decode_cuda_graph_metadata[forward_batch.batch_size]
        )

    # idiom: layers/attention/flashinfer_mla_backend.py init_forward_metadata target-verify arm (prefill_wrapper_verify); DCP plan with kv_len = seq_lens + draft_token_num
    # expect: SG203
    def plan_verify_dcp(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        updater = self.indices_updater_prefill
        kv_lens = dl.verify_global_lens(forward_batch.seq_lens[:bs], ndt)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=kv_lens.device)
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(kv_indptr[-1].item()), dtype=torch.int32, device=kv_lens.device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=kv_lens.device)
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

    def _replay_ids(self, forward_batch: ForwardBatch, bs: int) -> torch.Tensor:
        seq_lens = forward_batch.seq_lens[:bs]
        indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
        indptr[1:] = torch.cumsum(seq_lens, dim=0)
        out = torch.empty(int(forward_batch.seq_lens_sum), dtype=torch.int32, device=seq_lens.device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=indptr,
            out=out,
        )
        ids = filter_dcp_local_kv_indices(out)
        self.cuda_graph_kv_indices[: ids.numel()].copy_(ids)
        return self.cuda_graph_kv_indices

    # idiom: layers/attention/flashinfer_mla_backend.py _apply_cuda_graph_metadata decode replay; kv_len_arr_cpu from seq_lens_cpu without update_local_kv_lens_for_dcp
    # expect: SG203
    def plan_replay_from_cpu(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        kv_indices = self._replay_ids(forward_batch, bs)
        updater = self.indices_updater_decode
        self.decode_cuda_graph_metadata[bs].plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
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

    # idiom: layers/attention/flashinfer_mla_backend.py _apply_cuda_graph_metadata decode replay; update_local_kv_lens_for_dcp on kv_len_arr_cpu before the indptr cumsum
    # expect: clean
    def plan_replay_from_cpu_local(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        kv_indices = self._replay_ids(forward_batch, bs)
        updater = self.indices_updater_decode
        self.decode_cuda_graph_metadata[bs].plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
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

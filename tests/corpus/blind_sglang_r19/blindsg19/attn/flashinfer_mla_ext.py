"""FlashInfer-MLA planning variants for decode context parallel (DCP)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
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


class LocalIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that compacts the read stream to this DCP rank with the
    layout helper instead of the triton planner (no triton on the CPU CI)."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
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
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device="cuda"
        )
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
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


class CountingIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that counts the KV ids each rank plans (load report)."""

    def __init__(self, model_runner, attn_backend):
        super().__init__(model_runner, attn_backend)
        self.planned_kv_ids = 0

    # expect: clean
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
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
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share in place.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        self.planned_kv_ids += n_kernel_ids
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


class CloneSafeIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Keeps the caller's kv_indptr buffer untouched: it is shared with the
    multi-step draft backend, which reads it after this plan."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional["SpecInput"] = None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
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
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device="cuda"
        )
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            local_lens = kv_lens.clone()
            local_indptr = kv_indptr.clone()
            plan_dcp_decode_metadata(
                local_lens, local_indptr, kv_indices, False, fast_decode_kwargs, bs
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


class LocalIndicesFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = LocalIndicesUpdaterDecode(model_runner, self)


class CountingFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = CountingIndicesUpdaterDecode(model_runner, self)


class CloneSafeFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = CloneSafeIndicesUpdaterDecode(model_runner, self)


class HostPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Replays the decode graph with host-built plan arrays only."""

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
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
            **self.fast_decode_kwargs,
        )


class PinnedHostPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Same host-built replay plan, into a pinned buffer."""

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, kv_indices_buf=None):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        self._kv_len_pinned = torch.zeros(
            (max_bs,), dtype=torch.int32, device="cpu", pin_memory=True
        )

    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = self._kv_len_pinned[:bs]
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
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
            **self.fast_decode_kwargs,
        )


def _verify_plan_inputs(backend: FlashInferMLAAttnBackend, forward_batch: ForwardBatch):
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=kv_lens.device)
    kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
    kv_indices = torch.empty(
        int(forward_batch.seq_lens_sum) + bs * ndt,
        dtype=torch.int32,
        device=kv_lens.device,
    )
    backend.kv_index_translator.pack_read_stream(
        forward_batch.kv_loc_plan,
        req_pool_indices=forward_batch.req_pool_indices,
        seq_lens=kv_lens,
        indptr=kv_indptr,
        out=kv_indices,
    )
    qo_indptr = torch.arange(
        0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=kv_lens.device
    )
    return qo_indptr, kv_indptr, kv_indices, kv_lens


class VerifyPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Chain (topk == 1) target verify planned without the tree custom mask."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_target_verify():
            return self._plan_verify(forward_batch)
        return super().init_forward_metadata(forward_batch)

    # expect: SG203
    def _plan_verify(self, forward_batch: ForwardBatch) -> None:
        updater = self.indices_updater_prefill
        qo_indptr, kv_indptr, kv_indices, kv_lens = _verify_plan_inputs(
            self, forward_batch
        )
        num_heads = updater.num_local_heads
        if get_parallel().dcp_enabled:
            # The DCP decode group all-gathers the query heads.
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


class RefusingVerifyFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Chain target verify planned without the custom mask; DCP refused."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_target_verify():
            return self._plan_verify(forward_batch)
        return super().init_forward_metadata(forward_batch)

    # expect: clean
    def _plan_verify(self, forward_batch: ForwardBatch) -> None:
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla chain verify cannot bound each draft token's "
                "causal range on a DCP shard; use cutedsl_mla for DCP + MTP"
            )
        updater = self.indices_updater_prefill
        qo_indptr, kv_indptr, kv_indices, kv_lens = _verify_plan_inputs(
            self, forward_batch
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


class GatheredPrefillFlashInferMLABackend(FlashInferMLAAttnBackend):
    """DCP prefill: attention runs on the KV all-gathered from every rank."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            forward_batch.forward_mode.is_extend_without_speculative()
            and forward_batch.attn_dcp_metadata is not None
            and any(forward_batch.extend_prefix_lens_cpu)
        ):
            return self._plan_dcp_prefill(forward_batch)
        return super().init_forward_metadata(forward_batch)

    # expect: clean
    def _plan_dcp_prefill(self, forward_batch: ForwardBatch) -> None:
        dcp_meta = forward_batch.attn_dcp_metadata
        assert dcp_meta is not None and dcp_meta.dcp_kv_buffer is not None
        updater = self.indices_updater_prefill
        bs = forward_batch.batch_size
        device = forward_batch.seq_lens.device
        qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        # The gathered buffer holds every rank's share, laid out request by
        # request, so its indptr spans each request's whole length.
        kv_indptr = dcp_meta.dcp_kv_indptr
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_meta.dcp_kv_indices,
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
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)


class FlashInferMLADCPDecodePlanner:
    """Standalone decode planner for the fork's disaggregated decode tier,
    which plans a shared BatchMLAPagedAttentionWrapper outside the backend."""

    def __init__(self, backend: FlashInferMLAAttnBackend, wrapper):
        self.backend = backend
        self.wrapper = wrapper
        updater = backend.indices_updater_decode
        self.static_plan_kwargs = {
            "num_heads": updater.num_local_heads,
            "head_dim_ckv": updater.kv_lora_rank,
            "head_dim_kpe": updater.qk_rope_head_dim,
            "page_size": 1,
            "causal": False,
            "sm_scale": updater.scaling,
            "q_data_type": updater.data_type,
            "kv_data_type": updater.data_type,
        }

    def _global_stream(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.backend.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return seq_lens, kv_indptr, kv_indices

    # expect: SG203
    def plan(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        seq_lens, kv_indptr, kv_indices = self._global_stream(forward_batch)
        if get_parallel().dcp_enabled:
            kv_indices = self.backend.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        plan_kwargs = dict(self.static_plan_kwargs)
        plan_kwargs.update(
            qo_indptr=self.backend.q_indptr_decode[: bs + 1],
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            kv_len_arr=seq_lens.to(torch.int32),
        )
        self.wrapper.plan(**plan_kwargs)

    # expect: clean
    def plan_local(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        seq_lens, kv_indptr, kv_indices = self._global_stream(forward_batch)
        kv_lens = seq_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = self.backend.kv_index_translator.translate_dcp_read_ids(
                kv_indices[:n_ids]
            )
        plan_kwargs = dict(self.static_plan_kwargs)
        plan_kwargs.update(
            qo_indptr=self.backend.q_indptr_decode[: bs + 1],
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            kv_len_arr=kv_lens,
        )
        self.wrapper.plan(**plan_kwargs)

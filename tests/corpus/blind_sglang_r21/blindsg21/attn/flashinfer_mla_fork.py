"""Fork variants of the FlashInfer MLA backend and its indices updaters under
decode context parallel (DCP).

``BatchMLAPagedAttentionWrapper.plan`` takes ``(qo_indptr, kv_indptr,
kv_indices, kv_len_arr, ...)``; with DCP the indices a rank can read are its
own share of each request, and the plan's indptr / lengths must describe that
share.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAIndicesUpdaterPrefill,
    FlashInferMLAMultiStepDraftBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.spec_info import SpecInput
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper


# --------------------------------------------------------------------------
# Decode indices updaters
# --------------------------------------------------------------------------


class LocalIdsDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Eager DCP decode: keep this rank's ids with one boolean gather instead
    of the planner's Triton compaction."""

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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
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
        local_ids = filter_dcp_local_kv_indices(kv_indices)
        if translator.needs_read_translate:
            local_ids = translator.translate_dcp_read_ids(local_ids)
        wrapper.plan(
            q_indptr[: bs + 1],
            kv_indptr,
            local_ids,
            paged_kernel_lens.to(torch.int32),
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class PlannedDcpDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None or init_metadata_replay or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_lens = paged_kernel_lens.to(torch.int32, copy=True)
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
        # Rewrites kv_lens / kv_indptr to this rank's share and compacts its
        # ids to the front of kv_indices.
        n_local = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        if n_local > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_local]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        wrapper.plan(
            q_indptr[: bs + 1],
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


class DcpDraftDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Multi-step draft decode under DCP: the draft rows' read stream comes
    from ``spec_info`` (prefix + this branch's draft slots)."""

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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is None or init_metadata_replay or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        draft_indptr, draft_indices = spec_info.kv_indptr, spec_info.kv_indices
        rows = draft_indptr.shape[0] - 1
        translator = self.attn_backend.kv_index_translator
        local_ids = filter_dcp_local_kv_indices(draft_indices)
        if translator.needs_read_translate:
            local_ids = translator.translate_dcp_read_ids(local_ids)
        kv_lens = (draft_indptr[1:] - draft_indptr[:-1]).to(torch.int32)
        wrapper.plan(
            q_indptr[: rows + 1],
            draft_indptr,
            local_ids,
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


class LocalDraftDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is None or init_metadata_replay or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        parallel = get_parallel()
        draft_indptr, draft_indices = spec_info.kv_indptr, spec_info.kv_indices
        rows = draft_indptr.shape[0] - 1
        # Widened pages keep slot % dcp_size == position % dcp_size, so the
        # owner filter keeps exactly get_dcp_lens(row_len) ids per row.
        local_lens = get_dcp_lens(
            (draft_indptr[1:] - draft_indptr[:-1]), parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        local_indptr = torch.zeros_like(draft_indptr)
        local_indptr[1:] = torch.cumsum(local_lens, dim=0)
        translator = self.attn_backend.kv_index_translator
        local_ids = filter_dcp_local_kv_indices(draft_indices)
        if translator.needs_read_translate:
            local_ids = translator.translate_dcp_read_ids(local_ids)
        wrapper.plan(
            q_indptr[: rows + 1],
            local_indptr,
            local_ids,
            local_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


# --------------------------------------------------------------------------
# Prefill (target verify) indices updaters
# --------------------------------------------------------------------------


class DcpVerifyPrefillUpdater(FlashInferMLAIndicesUpdaterPrefill):
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper_ragged,
        wrapper_paged: BatchMLAPagedAttentionWrapper,
        req_pool_indices: torch.Tensor,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        seq_lens: torch.Tensor,
        prefix_lens: torch.Tensor,
        kv_indptr: torch.Tensor,
        qo_indptr: torch.Tensor,
        use_ragged: bool,
        spec_info: Optional[SpecInput] = None,
        attn_dcp_metadata=None,
        fast_verify_plan_kwargs: Optional[dict] = None,
        *,
        plan,
        qo_indptr_cpu: Optional[torch.Tensor] = None,
        kv_indptr_cpu: Optional[torch.Tensor] = None,
        kv_len_arr_cpu: Optional[torch.Tensor] = None,
    ):
        if spec_info is None or use_ragged or not get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens,
                paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr,
                use_ragged, spec_info, attn_dcp_metadata=attn_dcp_metadata,
                fast_verify_plan_kwargs=fast_verify_plan_kwargs, plan=plan,
                qo_indptr_cpu=qo_indptr_cpu, kv_indptr_cpu=kv_indptr_cpu,
                kv_len_arr_cpu=kv_len_arr_cpu,
            )
        kv_indices, kv_indptr, qo_indptr, _custom_mask = spec_info.generate_attn_arg_prefill(
            req_pool_indices=req_pool_indices,
            paged_kernel_lens=paged_kernel_lens,
            paged_kernel_lens_sum=paged_kernel_lens_sum,
            translator=self.attn_backend.kv_index_translator,
            plan=plan,
        )
        # The verify rows can only read the KV ids this rank holds.
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            self.scaling,
            self.q_data_type,
            self.data_type,
        )


class RefusingVerifyPrefillUpdater(FlashInferMLAIndicesUpdaterPrefill):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper_ragged,
        wrapper_paged: BatchMLAPagedAttentionWrapper,
        req_pool_indices: torch.Tensor,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        seq_lens: torch.Tensor,
        prefix_lens: torch.Tensor,
        kv_indptr: torch.Tensor,
        qo_indptr: torch.Tensor,
        use_ragged: bool,
        spec_info: Optional[SpecInput] = None,
        attn_dcp_metadata=None,
        fast_verify_plan_kwargs: Optional[dict] = None,
        *,
        plan,
        qo_indptr_cpu: Optional[torch.Tensor] = None,
        kv_indptr_cpu: Optional[torch.Tensor] = None,
        kv_len_arr_cpu: Optional[torch.Tensor] = None,
    ):
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla: speculative verify under decode context parallel "
                "needs per-token causal bounds; use cutedsl_mla"
            )
        return super().call_begin_forward(
            wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens,
            paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr,
            use_ragged, spec_info, attn_dcp_metadata=attn_dcp_metadata,
            fast_verify_plan_kwargs=fast_verify_plan_kwargs, plan=plan,
            qo_indptr_cpu=qo_indptr_cpu, kv_indptr_cpu=kv_indptr_cpu,
            kv_len_arr_cpu=kv_len_arr_cpu,
        )


# --------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------


class ForkFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Installs the fork's indices updaters."""

    decode_updater_cls = PlannedDcpDecodeUpdater
    prefill_updater_cls = RefusingVerifyPrefillUpdater

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.indices_updater_decode = self.decode_updater_cls(model_runner, self)
        if not skip_prefill:
            self.indices_updater_prefill = self.prefill_updater_cls(model_runner, self)


class HostReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Keeps the replay-time host lengths in one pinned buffer."""

    def _replay_kv_len_cpu(self, bs: int) -> torch.Tensor:
        buf = getattr(self, "_replay_kv_len_cpu_buf", None)
        if buf is None:
            buf = torch.zeros(
                self.cuda_graph_kv_lens.shape[0], dtype=torch.int32, pin_memory=True
            )
            self._replay_kv_len_cpu_buf = buf
        return buf[:bs]

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
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
                spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        kv_len_arr_cpu = self._replay_kv_len_cpu(bs)
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
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


class HostReplayLocalFlashInferMLABackend(HostReplayFlashInferMLABackend):
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
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
            return FlashInferMLAAttnBackend._apply_cuda_graph_metadata(
                self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        kv_len_arr_cpu = self._replay_kv_len_cpu(bs)
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        # In place: this rank's share under DCP, unchanged otherwise.
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


class DraftExtendFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Plans DRAFT_EXTEND_V2 itself so DCP draft extend reads only this rank's
    KV ids."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (
            forward_batch.forward_mode.is_draft_extend_v2() and get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        updater = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            filter_dcp_local_kv_indices(kv_indices),
            seq_lens.to(torch.int32),
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


class GatheredExtendFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Prefix-extend under DCP over the all-gathered KV buffer
    (``attn_dcp_metadata.dcp_kv_buffer``), which forward_extend reads instead
    of the rank-local pool."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        dcp_md = forward_batch.attn_dcp_metadata
        mode = forward_batch.forward_mode
        if (
            not mode.is_extend()
            or mode.is_target_verify()
            or dcp_md is None
            or dcp_md.dcp_kv_indptr is None
            or dcp_md.dcp_kv_buffer is None
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        # dcp_kv_indptr / dcp_kv_indices address the gathered buffer, which
        # holds every rank's prefix tokens plus the extend tokens.
        kv_indptr = dcp_md.dcp_kv_indptr
        updater = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_md.dcp_kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
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


class LocalIdsFlashInferMLABackend(ForkFlashInferMLAAttnBackend):
    decode_updater_cls = LocalIdsDecodeUpdater


class VerifyDcpFlashInferMLABackend(ForkFlashInferMLAAttnBackend):
    prefill_updater_cls = DcpVerifyPrefillUpdater


class DraftDcpFlashInferMLABackend(ForkFlashInferMLAAttnBackend):
    decode_updater_cls = DcpDraftDecodeUpdater


class LocalDraftFlashInferMLABackend(ForkFlashInferMLAAttnBackend):
    decode_updater_cls = LocalDraftDecodeUpdater


class ForkFlashInferMLAMultiStepDraftBackend(FlashInferMLAMultiStepDraftBackend):
    """Multi-step draft wrapper whose per-step backends use ``backend_cls``."""

    backend_cls = LocalDraftFlashInferMLABackend

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i] = self.backend_cls(
                model_runner,
                skip_prefill=True,
                kv_indptr_buf=self.kv_indptr[i],
                q_indptr_decode_buf=self.q_indptr_decode,
            )
        self.attn_backend_list = self.attn_backends


class GlobalDraftMultiStepDraftBackend(ForkFlashInferMLAMultiStepDraftBackend):
    backend_cls = DraftDcpFlashInferMLABackend

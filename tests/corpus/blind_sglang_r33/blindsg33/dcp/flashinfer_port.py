"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) under DCP."""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

logger = logging.getLogger(__name__)


def _plan_decode(updater, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens):
    wrapper.plan(
        q_indptr,
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


class SnapshotDcpIndicesUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Keeps the scheduler's kv_lens tensor untouched: the DCP planner rewrites
    its input in place and the same tensor is read back by the hisparse hook."""

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward — override (spec_info batches refused under DCP, replay to super()): plan_dcp_decode_metadata is given kv_lens.clone(), wrapper.plan receives kv_lens
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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError("draft decode is not sharded for DCP")
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
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
            n_ids = plan_dcp_decode_metadata(
                kv_lens.clone(), kv_indptr, kv_indices, False, {}, bs
            )
            if n_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        _plan_decode(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class InPlaceDcpIndicesUpdater(FlashInferMLAIndicesUpdaterDecode):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward — override (spec_info batches refused under DCP, replay to super()): plan_dcp_decode_metadata rewrites kv_lens / kv_indptr / kv_indices in place, wrapper.plan receives the same kv_lens
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
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError("draft decode is not sharded for DCP")
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
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
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            if n_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        _plan_decode(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class _VerifyPlanMixin:
    def _verify_plan_inputs(self, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        bs = forward_batch.batch_size
        ndt = spec_info.draft_token_num
        device = forward_batch.seq_lens.device
        kv_lens = (forward_batch.seq_lens + ndt).to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            int(forward_batch.seq_lens_sum) + ndt * bs, dtype=torch.int32, device=device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        qo_indptr = torch.arange(0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=device)
        return qo_indptr, kv_indptr, kv_indices, kv_lens


class ShardedVerifyFlashInferMLABackend(_VerifyPlanMixin, FlashInferMLAAttnBackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled:
            return self._plan_verify_dcp(forward_batch)
        return super().init_forward_metadata(forward_batch)

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (verify) — DCP target verify: plan_dcp_decode_metadata shards kv_lens / indptr / indices, prefill_wrapper_verify.plan(causal=True) over the draft_token_num-wide query
    # expect: SG203
    def _plan_verify_dcp(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        qo_indptr, kv_indptr, kv_indices, kv_lens = self._verify_plan_inputs(forward_batch)
        plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        upd = self.indices_updater_prefill
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            True,
            upd.scaling,
            upd.q_data_type,
            upd.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class DecodeOnlyDcpFlashInferMLABackend(FlashInferMLAAttnBackend):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata — raises NotImplementedError for TARGET_VERIFY / DRAFT_EXTEND_V2 / any spec_info batch when dcp_enabled, else defers to super()
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify()
            or mode.is_draft_extend_v2()
            or forward_batch.spec_info is not None
        ):
            raise NotImplementedError(
                "BatchMLAPagedAttentionWrapper takes no global causal bound; "
                "multi-token DCP queries need cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (paged prefill, attn_dcp_metadata branch) — DCP extend plan over the all-gathered dcp_kv_buffer: dcp_kv_indptr / dcp_kv_indices and kv_len_arr from their diff
    # expect: clean
    def plan_gathered_prefill(self, forward_batch: ForwardBatch) -> None:
        meta = forward_batch.attn_dcp_metadata
        if meta is None or meta.dcp_kv_indptr is None:
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        extend_lens = forward_batch.extend_seq_lens
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(extend_lens, dim=0)
        kv_indptr = meta.dcp_kv_indptr
        upd = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            meta.dcp_kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            True,
            upd.scaling,
            upd.q_data_type,
            upd.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)


class _ReplayBase(FlashInferMLAAttnBackend):
    def _replay_decode(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu):
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
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


class PinnedReplayFlashInferMLABackend(_ReplayBase):
    """Decode replay that stages host lens in a pinned buffer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pinned_lens: Optional[torch.Tensor] = None

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay) — kv_len_arr_cpu staged from seq_lens_cpu[:bs] into a pinned int32 buffer and handed to the fast decode plan
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
        if self._pinned_lens is None or self._pinned_lens.numel() < bs:
            self._pinned_lens = torch.empty((max(bs, 1),), dtype=torch.int32, pin_memory=True)
        kv_len_arr_cpu = self._pinned_lens[:bs]
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        self._replay_decode(plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu)


class CompactReplayFlashInferMLABackend(_ReplayBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay) — kv_len_arr_cpu from seq_lens_cpu[:bs], passed through update_local_kv_lens_for_dcp before the fast decode plan
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self._replay_decode(plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu)

"""FlashInfer MLA (``BatchMLAPagedAttentionWrapper``) backends of the fork.

Under DCP the MLA wrapper has no notion of ranks: its plan must be built from
this rank's KV lengths, indptr and (collapsed) indices. Upstream does that
for plain decode in ``FlashInferMLAIndicesUpdaterDecode.call_begin_forward``
via ``plan_dcp_decode_metadata`` and, on graph replay, by localizing the host
``kv_len_arr_cpu`` in ``_apply_cuda_graph_metadata``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAMultiStepDraftBackend,
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

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpecInput

logger = logging.getLogger(__name__)


class KvLenTrackingDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that keeps the step's un-sharded KV lengths for the
    fork's per-request KV accounting."""

    last_global_kv_lens: Optional[torch.Tensor] = None

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
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
        if spec_info is not None:
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
        step_kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        if init_metadata_replay:
            # Capture-stable buffer the captured wrapper reads; fill in place.
            kv_indices = fast_decode_kwargs["kv_indices"]
        else:
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
        plan_kv_lens = step_kv_lens.clone()
        self.last_global_kv_lens = plan_kv_lens
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                step_kv_lens,
                kv_indptr,
                kv_indices,
                init_metadata_replay,
                fast_decode_kwargs,
                bs,
            )
        if n_kernel_ids > 0 and not is_translated and translator.needs_read_translate:
            head = kv_indices[:n_kernel_ids]
            head.copy_(translator.translate_dcp_read_ids(head))

        if not init_metadata_replay:
            wrapper.plan(
                q_indptr,
                kv_indptr,
                kv_indices,
                plan_kv_lens,
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )


class KvLenSnapshotDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Same accounting; the snapshot is taken before sharding and the plan
    uses the sharded lengths."""

    last_global_kv_lens: Optional[torch.Tensor] = None

    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
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
        if spec_info is not None:
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
        step_kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        if init_metadata_replay:
            # Capture-stable buffer the captured wrapper reads; fill in place.
            kv_indices = fast_decode_kwargs["kv_indices"]
        else:
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
        self.last_global_kv_lens = step_kv_lens.clone()
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites the lengths / indptr / indices to this rank in place.
            n_kernel_ids = plan_dcp_decode_metadata(
                step_kv_lens,
                kv_indptr,
                kv_indices,
                init_metadata_replay,
                fast_decode_kwargs,
                bs,
            )
        if n_kernel_ids > 0 and not is_translated and translator.needs_read_translate:
            head = kv_indices[:n_kernel_ids]
            head.copy_(translator.translate_dcp_read_ids(head))

        if not init_metadata_replay:
            wrapper.plan(
                q_indptr,
                kv_indptr,
                kv_indices,
                step_kv_lens,
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )


class AccountingFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = KvLenTrackingDecodeUpdater(model_runner, self)


class SnapshotFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = KvLenSnapshotDecodeUpdater(model_runner, self)


class HostLensReplayMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay with the host length array built by one helper
    (shared with the fork's KV-usage exporter)."""

    def _rank_local_kv_len_arr(self, seq_lens_cpu: torch.Tensor) -> torch.Tensor:
        parallel = get_parallel()
        kv_len_arr_cpu = seq_lens_cpu.to(torch.int32)
        if parallel.dcp_enabled:
            kv_len_arr_cpu = get_dcp_lens(
                kv_len_arr_cpu, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        return kv_len_arr_cpu

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
        kv_len_arr_cpu = self._rank_local_kv_len_arr(seq_lens_cpu[:bs])
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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


class HostArrayReplayMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay using only the fork helper for the host lengths."""

    def _rank_local_kv_len_arr(self, seq_lens_cpu: torch.Tensor) -> torch.Tensor:
        parallel = get_parallel()
        kv_len_arr_cpu = seq_lens_cpu.to(torch.int32)
        if parallel.dcp_enabled:
            kv_len_arr_cpu = get_dcp_lens(
                kv_len_arr_cpu, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        return kv_len_arr_cpu

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
        kv_len_arr_cpu = self._rank_local_kv_len_arr(seq_lens_cpu[:bs])
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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


class DeferredShardReplayMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay leaving all sharding to the decode updater."""

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
        # plan_dcp_decode_metadata (inside the updater) shards the lengths.
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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


class InlineShardReplayMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay sharding the host lengths inline under DCP."""

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
        parallel = get_parallel()
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if parallel.dcp_enabled:
            # The replay plan reads the host lengths as-is (no re-sharding in
            # plan_dcp_decode_metadata's replay branch).
            kv_len_arr_cpu = get_dcp_lens(
                kv_len_arr_cpu, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            kv_len_arr_cpu, dim=0
        )
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


class ShardedVerifyFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Eager DCP target verify on the FlashInfer MLA wrapper: the verify plan
    is built over this rank's shard of each request."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        parallel = get_parallel()
        bs = forward_batch.batch_size
        device = forward_batch.seq_lens.device
        draft_token_num = forward_batch.spec_info.draft_token_num

        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(
            torch.int32
        )
        global_indptr = torch.zeros((bs + 1,), dtype=torch.int32, device=device)
        global_indptr[1:] = torch.cumsum(global_kv_lens, dim=0)
        widened = torch.empty(
            int(global_indptr[-1].item()), dtype=torch.int32, device=device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=global_kv_lens,
            indptr=global_indptr,
            out=widened,
        )
        kv_indices = self.kv_index_translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(widened)
        )
        local_kv_lens = get_dcp_lens(
            global_kv_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(local_kv_lens, dim=0)
        qo_indptr = torch.arange(
            0,
            (bs + 1) * draft_token_num,
            draft_token_num,
            dtype=torch.int32,
            device=device,
        )
        updater = self.indices_updater_prefill
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            local_kv_lens,
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


class VerifyPlanFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Refuses DCP target verify on the FlashInfer MLA wrapper."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            raise NotImplementedError(
                "flashinfer_mla cannot give a multi-token verify query a global "
                "causal bound under DCP; use --attention-backend cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)


class ShardedDraftDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Draft-decode (spec_info) plan over this rank's KV slots."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
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
        if spec_info is None or not get_parallel().dcp_enabled:
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
        draft_kv_indptr, draft_kv_indices = spec_info.kv_indptr, spec_info.kv_indices
        # This rank's slots only, collapsed to physical rows.
        kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(draft_kv_indices)
        )
        kv_lens = (draft_kv_indptr[1:] - draft_kv_indptr[:-1]).to(torch.int32)
        wrapper.plan(
            q_indptr,
            draft_kv_indptr,
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


class DraftDecodeDcpUpdater(FlashInferMLAIndicesUpdaterDecode):
    """Draft-decode (spec_info) planning with DCP refused."""

    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
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
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft decode kv_indptr/kv_indices are built over global lengths; "
                "flashinfer_mla draft decode is not supported with DCP"
            )
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


class ShardedDraftMultiStepBackend(FlashInferMLAMultiStepDraftBackend):
    def __init__(self, model_runner: "ModelRunner", topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        for backend in self.attn_backends:
            backend.indices_updater_decode = ShardedDraftDecodeUpdater(
                model_runner, backend
            )


class DraftDcpMultiStepBackend(FlashInferMLAMultiStepDraftBackend):
    def __init__(self, model_runner: "ModelRunner", topk: int, speculative_num_steps: int):
        super().__init__(model_runner, topk, speculative_num_steps)
        for backend in self.attn_backends:
            backend.indices_updater_decode = DraftDecodeDcpUpdater(
                model_runner, backend
            )

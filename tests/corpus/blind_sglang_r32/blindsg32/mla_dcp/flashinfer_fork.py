"""Forked FlashInfer MLA backend (BatchMLAPagedAttentionWrapper) with DCP.

The MLA wrapper's ``plan`` takes ``(qo_indptr, kv_indptr, kv_indices,
kv_len_arr, ...)``; under DCP all three KV arguments must describe this
rank's share of each request. The wrapper has no global causal bound, so
multi-token (verify / draft-extend) queries cannot run here under DCP.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
    fast_mla_decode_plan,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg32.mla_dcp.dcp_math import DcpShard, cu_lens

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class ForkMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward; kv_indices filtered to this rank but kv_indptr / kv_len_arr built from the whole lengths for wrapper.plan
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: Any,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[Any] = None,
        *,
        plan: Any,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs: Any,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
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
        if get_parallel().dcp_enabled:
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        plan_args = (
            q_indptr[: bs + 1],
            kv_indptr,
            kv_indices,
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
        wrapper.plan(*plan_args)


class LocalMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: layers/attention/flashinfer_mla_backend.py call_begin_forward + layers/dcp/planner.py plan_dcp_decode_metadata; kv_lens / kv_indptr / kv_indices rewritten to this rank's share before wrapper.plan
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: Any,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[Any] = None,
        *,
        plan: Any,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs: Any,
    ):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
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
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
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


class ForkFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: "ModelRunner", *args: Any, **kwargs: Any):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = ForkMLAIndicesUpdaterDecode(model_runner, self)
        self.shard = DcpShard.current()

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata decode replay; kv_len_arr_cpu / kv_indptr_cpu for the fast plan built from whole seq_lens_cpu under DCP
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: Any,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[Any],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
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

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata target-verify branch; verify plan under DCP with local indices but whole kv lengths, causal, no refusal
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_target_verify():
            return super().init_forward_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        kv_indices, kv_indptr, qo_indptr, _ = spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )
        if self.shard.enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        updater = self.indices_updater_prefill
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
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
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # idiom: layers/attention/flashinfer_mla_backend.py init_cuda_graph_state cuda_graph_kv_lens / kv_indptr buffers; replay copies whole seq_lens into the buffers the captured wrapper reads
    # expect: SG203
    def _refresh_graph_kv_lens(
        self, bs: int, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor
    ) -> None:
        self.cuda_graph_kv_lens[:bs].copy_(seq_lens[:bs])
        self.cuda_graph_kv_indptr[1 : bs + 1] = torch.cumsum(
            self.cuda_graph_kv_lens[:bs], dim=0
        )
        wrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        fast_mla_decode_plan(
            wrapper,
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            cu_lens(kv_len_arr_cpu),
            self.cuda_graph_kv_indices,
            kv_len_arr_cpu,
            self.indices_updater_decode.num_local_heads,
            self.indices_updater_decode.kv_lora_rank,
            self.indices_updater_decode.qk_rope_head_dim,
            1,
            False,
            self.indices_updater_decode.scaling,
            self.indices_updater_decode.data_type,
            self.indices_updater_decode.data_type,
        )

    # idiom: layers/attention/flashinfer_mla_backend.py init_forward_metadata eager DRAFT_EXTEND_V2 fast plan; host kv_len_arr from whole seq_lens_cpu, multi-token query, attn_dcp_metadata dropped
    # expect: SG203
    def _plan_draft_extend_fast(self, forward_batch: ForwardBatch) -> None:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.num_tokens_per_req
        self.fast_plan_qo_indptr_cpu[: bs + 1] = torch.arange(
            0, (bs + 1) * ndt, ndt, dtype=torch.int32
        )
        self.fast_plan_kv_len_arr_cpu[:bs] = forward_batch.seq_lens_cpu[:bs]
        self.fast_plan_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            self.fast_plan_kv_len_arr_cpu[:bs], dim=0
        )
        self.indices_updater_prefill.update(
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            forward_batch.extend_prefix_lens,
            prefill_wrapper_paged=self.prefill_wrapper_paged,
            use_ragged=False,
            attn_dcp_metadata=None,
            qo_indptr_cpu=self.fast_plan_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.fast_plan_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=self.fast_plan_kv_len_arr_cpu[:bs],
            plan=forward_batch.kv_loc_plan,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)


class LocalFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner: "ModelRunner", *args: Any, **kwargs: Any):
        super().__init__(model_runner, *args, **kwargs)
        self.indices_updater_decode = LocalMLAIndicesUpdaterDecode(model_runner, self)
        self.shard = DcpShard.current()

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata decode replay; host kv_len_arr localized with update_local_kv_lens_for_dcp before the indptr cumsum
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: Any,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[Any],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
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

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata; refuses target-verify / draft-extend under DCP (the MLA wrapper has no global causal bound)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if self.shard.enabled and (mode.is_target_verify() or mode.is_draft_extend_v2()):
            raise NotImplementedError(
                "flashinfer MLA cannot run a multi-token query under DCP; "
                "use --decode-attention-backend cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)

    # idiom: layers/attention/flashinfer_mla_backend.py init_cuda_graph_state cuda_graph_kv_lens buffers; replay writes this rank's lengths (DcpShard.localize) into the captured buffers and the fast plan
    # expect: clean
    def _refresh_graph_kv_lens(
        self, bs: int, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor
    ) -> None:
        self.cuda_graph_kv_lens[:bs].copy_(self.shard.localize(seq_lens[:bs]))
        self.cuda_graph_kv_indptr[1 : bs + 1] = torch.cumsum(
            self.cuda_graph_kv_lens[:bs], dim=0
        )
        wrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = self.shard.localize(seq_lens_cpu[:bs])
        fast_mla_decode_plan(
            wrapper,
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            cu_lens(kv_len_arr_cpu),
            self.cuda_graph_kv_indices,
            kv_len_arr_cpu,
            self.indices_updater_decode.num_local_heads,
            self.indices_updater_decode.kv_lora_rank,
            self.indices_updater_decode.qk_rope_head_dim,
            1,
            False,
            self.indices_updater_decode.scaling,
            self.indices_updater_decode.data_type,
            self.indices_updater_decode.data_type,
        )

    # idiom: layers/attention/flashinfer_mla_backend.py init_forward_metadata eager DRAFT_EXTEND_V2 fast plan; raises under DCP before building host arrays from seq_lens_cpu
    # expect: clean
    def _plan_draft_extend_fast(self, forward_batch: ForwardBatch) -> None:
        assert forward_batch.forward_mode.is_draft_extend_v2()
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft extend under DCP needs a global causal bound; not "
                "available on the flashinfer MLA wrapper"
            )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.num_tokens_per_req
        self.fast_plan_qo_indptr_cpu[: bs + 1] = torch.arange(
            0, (bs + 1) * ndt, ndt, dtype=torch.int32
        )
        self.fast_plan_kv_len_arr_cpu[:bs] = forward_batch.seq_lens_cpu[:bs]
        self.fast_plan_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(
            self.fast_plan_kv_len_arr_cpu[:bs], dim=0
        )
        self.indices_updater_prefill.update(
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            forward_batch.extend_prefix_lens,
            prefill_wrapper_paged=self.prefill_wrapper_paged,
            use_ragged=False,
            qo_indptr_cpu=self.fast_plan_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.fast_plan_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=self.fast_plan_kv_len_arr_cpu[:bs],
            plan=forward_batch.kv_loc_plan,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

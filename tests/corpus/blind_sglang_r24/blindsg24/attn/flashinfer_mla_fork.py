"""FlashInfer-MLA backend variants: the fork plans the decode wrapper itself
(one plan per step, no indices-updater indirection) and keeps its own
CUDA-graph replay path.

Under DCP the decode plan must describe this rank's share only: its own
KV ids and its own per-request lengths (SGLang: plan_dcp_decode_metadata /
update_local_kv_lens_for_dcp).
"""

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class _DecodePlanMixin:
    def _decode_plan_args(self):
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

    def _global_read_stream(self, forward_batch: ForwardBatch, bs: int):
        """Virtual KV ids of every request, whole sequences, request-major."""
        seq_lens = forward_batch.seq_lens[:bs]
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices


class ForkFlashInferMLABackend(_DecodePlanMixin, FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (decode_wrapper.plan)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._global_read_stream(forward_batch, bs)
        if get_parallel().dcp_enabled:
            # The stream is virtual under DCP: collapse it to physical rows.
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            *self._decode_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (kv_lens from the kv_indptr differences)
    # expect: SG203
    def plan_decode_from_indptr(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_indptr, kv_indices = self._global_read_stream(forward_batch, bs)
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            *self._decode_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # idiom: sglang/srt/layers/dcp/layout.py update_local_kv_lens_for_dcp (in-place localization) around decode_wrapper.plan
    # expect: SG203
    def plan_decode_localize_after(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._global_read_stream(forward_batch, bs)
        dcp = get_parallel().dcp_enabled
        if dcp:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            *self._decode_plan_args(),
        )
        if dcp:
            # fixup_zero_kv_rows below needs this rank's lengths.
            update_local_kv_lens_for_dcp(kv_lens)
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
        return kv_lens


class ForkFlashInferMLABackendPlanned(_DecodePlanMixin, FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (plan_dcp_decode_metadata before wrapper.plan)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._global_read_stream(forward_batch, bs)
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share, compacts ids.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            local = kv_indices[:n_local]
            local.copy_(self.kv_index_translator.translate_dcp_read_ids(local))
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            *self._decode_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # idiom: sglang/srt/layers/dcp/layout.py update_local_kv_lens_for_dcp before decode_wrapper.plan
    # expect: clean
    def plan_decode_localize_before(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._global_read_stream(forward_batch, bs)
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indptr = self.kv_indptr[: bs + 1]
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            *self._decode_plan_args(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
        return kv_lens

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (attn_dcp_metadata: dcp_kv_indptr over the all-gathered dcp_kv_buffer)
    # expect: clean
    def plan_extend_over_gathered_kv(self, forward_batch: ForwardBatch):
        dcp_meta = forward_batch.attn_dcp_metadata
        if dcp_meta is None or dcp_meta.dcp_kv_buffer is None:
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        # forward_extend reads the all-gathered dcp_kv_buffer, which holds
        # every rank's prefix: whole-sequence lengths are the right ones here.
        kv_indptr = dcp_meta.dcp_kv_indptr
        kv_indices = dcp_meta.dcp_kv_indices
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        upd = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
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


class ReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Replays the decode graph with host-built plan arrays."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay fast plan)
    # expect: SG203
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if in_capture or not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            forward_batch.seq_lens[:bs],
            forward_batch.seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=forward_batch.spec_info,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            plan=forward_batch.kv_loc_plan,
            **self.fast_decode_kwargs,
        )


class ReplayFlashInferMLABackendLocal(FlashInferMLAAttnBackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp on kv_len_arr_cpu)
    # expect: clean
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if in_capture or not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
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
            forward_batch.seq_lens[:bs],
            forward_batch.seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=forward_batch.spec_info,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            plan=forward_batch.kv_loc_plan,
            **self.fast_decode_kwargs,
        )


class VerifyFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Target verify planned directly on prefill_wrapper_verify."""

    def __init__(self, model_runner, skip_prefill: bool = False, **kwargs):
        super().__init__(model_runner, skip_prefill, **kwargs)
        self.dcp_world_size = get_parallel().attn_dcp_size

    def _verify_stream(self, forward_batch: ForwardBatch):
        return forward_batch.spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (spec_info verify path, wrapper_paged.plan)
    # expect: SG203
    def plan_target_verify(self, forward_batch: ForwardBatch):
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_indices, kv_indptr, qo_indptr, _ = self._verify_stream(forward_batch)
        upd = self.indices_updater_prefill
        num_heads = upd.num_local_heads
        if self.dcp_world_size > 1:
            # The DCP query is all-gathered across the group.
            num_heads *= self.dcp_world_size
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        kv_len_arr = (forward_batch.seq_lens + draft_token_num).to(torch.int32)
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            num_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            True,
            upd.scaling,
            upd.q_data_type,
            upd.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # idiom: sglang/srt/layers/attention/attention_registry.py create_trtllm_mla_backend (DCP + speculative refused up front)
    # expect: clean
    def plan_target_verify_single_rank(self, forward_batch: ForwardBatch):
        if self.dcp_world_size > 1:
            raise ValueError(
                "FlashInfer-MLA target verify is not DCP-aware in this fork; "
                "run speculative decoding with --dcp-size 1 or cutedsl_mla"
            )
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_indices, kv_indptr, qo_indptr, _ = self._verify_stream(forward_batch)
        upd = self.indices_updater_prefill
        kv_len_arr = (forward_batch.seq_lens + draft_token_num).to(torch.int32)
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
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

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend (self.dcp_world_size) + FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def plan_decode_dcp_aware(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if self.dcp_world_size > 1:
            kv_indices.copy_(self.kv_index_translator.translate_dcp_read_ids(kv_indices))
        upd = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
            upd.num_local_heads,
            upd.kv_lora_rank,
            upd.qk_rope_head_dim,
            1,
            False,
            upd.scaling,
            upd.data_type,
            upd.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

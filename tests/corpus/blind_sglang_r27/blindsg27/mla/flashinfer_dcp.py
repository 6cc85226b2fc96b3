"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) backends with DCP."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAIndicesUpdaterPrefill,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel

from blindsg27.mla import kernels


def _translate_prefix(translator, kv_indices: torch.Tensor, n_kernel_ids: int, is_translated: bool) -> None:
    if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
        valid = kv_indices[:n_kernel_ids]
        valid.copy_(translator.translate_dcp_read_ids(valid))


class PostPlanLocalizeIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward (wrapper.plan issued before plan_dcp_decode_metadata shards the lengths)
    # expect: SG203
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay, spec_info, plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs)
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
        kernels.plan_mla_wrapper(
            wrapper, q_indptr, kv_indptr, kv_indices, kv_lens,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )
        # Shard the ids afterwards; the wrapper reads kv_indices at run time.
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        _translate_prefix(translator, kv_indices, n_kernel_ids, is_translated)


class RankLocalIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward (plan_dcp_decode_metadata rewrites kv_lens/kv_indptr before wrapper.plan)
    # expect: clean
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay, spec_info, plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs)
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
            # kv_lens / kv_indptr become this rank's share, in place.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        _translate_prefix(translator, kv_indices, n_kernel_ids, is_translated)
        kernels.plan_mla_wrapper(
            wrapper, q_indptr, kv_indptr, kv_indices, kv_lens,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class EarlyLensIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward (kv_len_arr taken from kv_indptr before plan_dcp_decode_metadata shards it)
    # expect: SG203
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay, spec_info, plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs)
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
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
                paged_kernel_lens.to(torch.int32), kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        _translate_prefix(translator, kv_indices, n_kernel_ids, is_translated)
        kernels.plan_mla_wrapper(
            wrapper, q_indptr, kv_indptr, kv_indices, kv_len_arr,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class LateLensIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward (kv_len_arr derived from kv_indptr after plan_dcp_decode_metadata)
    # expect: clean
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr, init_metadata_replay, spec_info, plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs)
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
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
                paged_kernel_lens.to(torch.int32), kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        _translate_prefix(translator, kv_indices, n_kernel_ids, is_translated)
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        kernels.plan_mla_wrapper(
            wrapper, q_indptr, kv_indptr, kv_indices, kv_len_arr,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.scaling,
            q_data_type=self.data_type,
            kv_data_type=self.data_type,
        )


class VerifyIndicesUpdaterPrefill(FlashInferMLAIndicesUpdaterPrefill):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill.call_begin_forward target verify under DCP (ids filtered to this rank, kv_indptr/kv_len_arr of the whole sequence)
    # expect: SG203
    def call_begin_forward(self, wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr, use_ragged, spec_info=None, attn_dcp_metadata=None, fast_verify_plan_kwargs=None, *, plan, qo_indptr_cpu=None, kv_indptr_cpu=None, kv_len_arr_cpu=None):
        if spec_info is None or use_ragged or not get_parallel().dcp_enabled:
            return super().call_begin_forward(wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr, use_ragged, spec_info, attn_dcp_metadata, fast_verify_plan_kwargs, plan=plan, qo_indptr_cpu=qo_indptr_cpu, kv_indptr_cpu=kv_indptr_cpu, kv_len_arr_cpu=kv_len_arr_cpu)
        kv_indices, kv_indptr, qo_indptr, _custom_mask = spec_info.generate_attn_arg_prefill(
            req_pool_indices=req_pool_indices,
            paged_kernel_lens=paged_kernel_lens,
            paged_kernel_lens_sum=paged_kernel_lens_sum,
            translator=self.attn_backend.kv_index_translator,
            plan=plan,
        )
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        # Keep only this rank's pages.
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kernels.plan_mla_wrapper(
            wrapper_paged, qo_indptr, kv_indptr, kv_indices, kv_len_arr,
            num_heads=self.num_local_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=True,
            sm_scale=self.scaling,
            q_data_type=self.q_data_type,
            kv_data_type=self.data_type,
        )


class StrictVerifyIndicesUpdaterPrefill(FlashInferMLAIndicesUpdaterPrefill):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (DCP + speculative verify refused: the MLA wrapper takes no global causal bound)
    # expect: clean
    def call_begin_forward(self, wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr, use_ragged, spec_info=None, attn_dcp_metadata=None, fast_verify_plan_kwargs=None, *, plan, qo_indptr_cpu=None, kv_indptr_cpu=None, kv_len_arr_cpu=None):
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla: DCP target verify / draft extend is not supported "
                "(no global causal bound in BatchMLAPagedAttentionWrapper)"
            )
        return super().call_begin_forward(wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, seq_lens, prefix_lens, kv_indptr, qo_indptr, use_ragged, spec_info, attn_dcp_metadata, fast_verify_plan_kwargs, plan=plan, qo_indptr_cpu=qo_indptr_cpu, kv_indptr_cpu=kv_indptr_cpu, kv_len_arr_cpu=kv_len_arr_cpu)


class DcpFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA with our rank-local decode planner installed."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.indices_updater_decode = RankLocalIndicesUpdaterDecode(model_runner, self)
        if not skip_prefill:
            self.indices_updater_prefill = StrictVerifyIndicesUpdaterPrefill(model_runner, self)

    def _plan_decode_replay(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu):
        """Shared body of the graph-replay decode plan (fast plan, host arrays)."""
        updater = self.indices_updater_decode
        kv_indptr = self.cuda_graph_kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens[:bs], dim=0)
        kv_indices = self.cuda_graph_kv_indices
        translator = self.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices[:bs],
            seq_lens=seq_lens[:bs],
            indptr=kv_indptr[: bs + 1],
            out=kv_indices,
        )
        n_kernel_ids = seq_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                seq_lens[:bs].to(torch.int32), kv_indptr[: bs + 1], kv_indices, False, {}, bs
            )
        _translate_prefix(translator, kv_indices, n_kernel_ids, is_translated)
        return updater, kv_indices


class SpecDraftMLABackend(DcpFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend.init_forward_metadata draft decode with spec_info.kv_indptr (the whole sequence) planned under DCP
    # expect: SG203
    def init_forward_metadata(self, forward_batch):
        spec_info = forward_batch.spec_info
        if not (forward_batch.forward_mode.is_decode_or_idle() and spec_info is not None):
            return super().init_forward_metadata(forward_batch)
        # Decode under DCP returns the LSE for the cross-rank merge.
        self.return_lse = get_parallel().dcp_enabled
        kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
        bs = kv_indptr.shape[0] - 1
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        updater = self.indices_updater_decode
        kernels.plan_mla_wrapper(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=updater.num_local_heads,
            kv_lora_rank=updater.kv_lora_rank,
            qk_rope_head_dim=updater.qk_rope_head_dim,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class SpecDraftMLABackendFixed(DcpFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend.init_forward_metadata draft decode with spec_info (refused under DCP)
    # expect: clean
    def init_forward_metadata(self, forward_batch):
        spec_info = forward_batch.spec_info
        if not (forward_batch.forward_mode.is_decode_or_idle() and spec_info is not None):
            return super().init_forward_metadata(forward_batch)
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla draft decode: spec_info.kv_indptr spans the whole "
                "sequence; DCP drafts need the rank-local planner"
            )
        kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
        bs = kv_indptr.shape[0] - 1
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        updater = self.indices_updater_decode
        kernels.plan_mla_wrapper(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=updater.num_local_heads,
            kv_lora_rank=updater.kv_lora_rank,
            qk_rope_head_dim=updater.qk_rope_head_dim,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class GraphReplayMLABackend(DcpFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend._apply_cuda_graph_metadata decode replay without update_local_kv_lens_for_dcp (host kv_len_arr of the whole sequence)
    # expect: SG203
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu, in_capture=False):
        if in_capture or spec_info is not None or not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu, in_capture)
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        updater, kv_indices = self._plan_decode_replay(
            plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu
        )
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


class GraphReplayMLABackendFixed(DcpFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend._apply_cuda_graph_metadata decode replay (update_local_kv_lens_for_dcp on the host kv_len_arr first)
    # expect: clean
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu, in_capture=False):
        if in_capture or spec_info is not None or not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu, in_capture)
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        updater, kv_indices = self._plan_decode_replay(
            plan, bs, req_pool_indices, seq_lens, seq_lens_sum, kv_len_arr_cpu
        )
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


class DcpOffFastPlanMLABackend(DcpFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend.init_forward_metadata (host fast plan with whole-sequence lengths only when DCP is off)
    # expect: clean
    def init_forward_metadata(self, forward_batch):
        if (
            get_parallel().dcp_enabled
            or not forward_batch.forward_mode.is_decode()
            or forward_batch.spec_info is not None
            or forward_batch.seq_lens_cpu is None
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        updater = self.indices_updater_decode
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(forward_batch.seq_lens, dim=0)
        kv_indices = torch.empty(forward_batch.seq_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.kv_index_translator
        is_translated = translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            indptr=kv_indptr[: bs + 1],
            out=kv_indices,
        )
        _translate_prefix(translator, kv_indices, forward_batch.seq_lens_sum, is_translated)
        kernels.plan_mla_wrapper(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr[: bs + 1],
            kv_indices,
            kv_lens,
            num_heads=updater.num_local_heads,
            kv_lora_rank=updater.kv_lora_rank,
            qk_rope_head_dim=updater.qk_rope_head_dim,
            causal=False,
            sm_scale=updater.scaling,
            q_data_type=updater.data_type,
            kv_data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

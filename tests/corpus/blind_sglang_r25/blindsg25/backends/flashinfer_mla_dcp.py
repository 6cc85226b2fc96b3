"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) decode planning under DCP."""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg25.utils.mla_launch import plan_mla_decode_wrapper

logger = logging.getLogger(__name__)


class ShardedIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that shards the read stream to this DCP rank."""

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
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
        # expect: clean
        if spec_info is not None and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft-decode kv_indptr from spec_info is not DCP-sharded"
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = (
            torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
            if not init_metadata_replay
            else fast_decode_kwargs["kv_indices"]
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
                kv_lens, kv_indptr, kv_indices, init_metadata_replay,
                fast_decode_kwargs, bs,
            )
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        if not init_metadata_replay:
            wrapper.plan(
                q_indptr, kv_indptr, kv_indices, kv_lens,
                self.num_local_heads, self.kv_lora_rank, self.qk_rope_head_dim,
                1, False, self.scaling, self.data_type, self.data_type,
            )
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads, self.kv_lora_rank, self.qk_rope_head_dim,
                1, False, self.scaling, self.data_type, self.data_type,
            )


class UnshardedIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater for the physical (non-translated) pool."""

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
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
        # expect: SG203
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        if spec_info is None:
            kv_lens = paged_kernel_lens.to(torch.int32)
            kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
            kv_indptr = kv_indptr[: bs + 1]
            kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
            self.attn_backend.kv_index_translator.pack_read_stream(
                plan,
                req_pool_indices=req_pool_indices,
                seq_lens=paged_kernel_lens,
                indptr=kv_indptr,
                out=kv_indices,
            )
            if get_parallel().dcp_enabled:
                # Keep only the slots this rank owns, collapsed to its rows.
                kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                    filter_dcp_local_kv_indices(kv_indices)
                )
        else:
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        wrapper.plan(
            q_indptr, kv_indptr, kv_indices, kv_lens,
            self.num_local_heads, self.kv_lora_rank, self.qk_rope_head_dim,
            1, False, self.scaling, self.data_type, self.data_type,
        )


class ForkFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA with the fork's decode planning entry points."""

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
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
        # expect: clean
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

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode)
        # expect: clean
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        updater = self.indices_updater_decode
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(forward_batch.seq_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.kv_index_translator
        is_translated = translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n = forward_batch.seq_lens_sum
        if get_parallel().dcp_enabled:
            # In place: kv_lens / kv_indptr become this rank's share.
            n = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        if not is_translated and n > 0 and translator.needs_read_translate:
            kv_indices[:n] = translator.translate_dcp_read_ids(kv_indices[:n])
        plan_mla_decode_wrapper(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=updater.num_local_heads,
            kv_lora_rank=updater.kv_lora_rank,
            qk_rope_head_dim=updater.qk_rope_head_dim,
            sm_scale=updater.scaling,
            data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    def _replan_decode_wrapper(self, wrapper, kv_lens: torch.Tensor, kv_indices: torch.Tensor, bs: int):
        # idiom: layers/dcp/layout.py update_local_kv_lens_for_dcp + FlashInferMLAIndicesUpdaterDecode.call_begin_forward
        # expect: clean
        updater = self.indices_updater_decode
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
            update_local_kv_lens_for_dcp(kv_lens)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        wrapper.plan(
            self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_lens,
            updater.num_local_heads, updater.kv_lora_rank, updater.qk_rope_head_dim,
            1, False, updater.scaling, updater.data_type, updater.data_type,
        )

    def _plan_decode_from_host(self, forward_batch: ForwardBatch):
        # idiom: layers/attention/flashinfer_mla_backend.py _apply_cuda_graph_metadata (host lens, eager)
        # expect: clean
        updater = self.indices_updater_decode
        parallel = get_parallel()
        bs = forward_batch.batch_size
        seq_lens_cpu = forward_batch.seq_lens_cpu[:bs]
        kv_len_arr_cpu = get_dcp_lens(seq_lens_cpu, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(int(seq_lens_cpu.sum()), dtype=torch.int32, device="cuda")
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            indptr=kv_indptr,
            out=kv_indices,
        )
        if parallel.dcp_enabled:
            n = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, True,
                {"kv_len_arr_cpu": kv_len_arr_cpu}, bs,
            )
            kv_indices[:n] = self.kv_index_translator.translate_dcp_read_ids(kv_indices[:n])
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1].cpu(), kv_indptr_cpu, kv_indices, kv_len_arr_cpu,
            updater.num_local_heads, updater.kv_lora_rank, updater.qk_rope_head_dim,
            1, False, updater.scaling, updater.data_type, updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class HostLensFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """Earlier port of the decode planning that feeds host lengths to plan()."""

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
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
        # expect: SG203
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
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

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode)
        # expect: SG203
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        updater = self.indices_updater_decode
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(forward_batch.seq_lens_sum, dtype=torch.int32, device="cuda")
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        # forward_decode returns the LSE for the cross-rank merge when DCP is on.
        self._dcp_return_lse = get_parallel().dcp_enabled
        plan_mla_decode_wrapper(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=updater.num_local_heads,
            kv_lora_rank=updater.kv_lora_rank,
            qk_rope_head_dim=updater.qk_rope_head_dim,
            sm_scale=updater.scaling,
            data_type=updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    def _replan_decode_wrapper(self, wrapper, kv_lens: torch.Tensor, kv_indices: torch.Tensor, bs: int):
        # idiom: layers/dcp/layout.py update_local_kv_lens_for_dcp + FlashInferMLAIndicesUpdaterDecode.call_begin_forward
        # expect: SG203
        updater = self.indices_updater_decode
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
            local_kv_lens = kv_lens.clone()
            update_local_kv_lens_for_dcp(local_kv_lens)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        wrapper.plan(
            self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_lens,
            updater.num_local_heads, updater.kv_lora_rank, updater.qk_rope_head_dim,
            1, False, updater.scaling, updater.data_type, updater.data_type,
        )

    def _plan_decode_from_host(self, forward_batch: ForwardBatch):
        # idiom: layers/attention/flashinfer_mla_backend.py _apply_cuda_graph_metadata (host lens, eager)
        # expect: SG203
        updater = self.indices_updater_decode
        bs = forward_batch.batch_size
        kv_len_arr_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr.copy_(kv_indptr_cpu, non_blocking=True)
        kv_indices = torch.empty(int(kv_len_arr_cpu.sum()), dtype=torch.int32, device="cuda")
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1].cpu(), kv_indptr_cpu, kv_indices, kv_len_arr_cpu,
            updater.num_local_heads, updater.kv_lora_rank, updater.qk_rope_head_dim,
            1, False, updater.scaling, updater.data_type, updater.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

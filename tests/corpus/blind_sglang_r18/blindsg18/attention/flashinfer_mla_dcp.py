"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) planning under DCP.

Overrides of the stock FlashInfer-MLA backend / indices updater that we keep
for the MI/H20 clusters: a leaner decode plan, a host-side fast plan for
graph replay, and the gathered-KV extend plan.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
    fast_mla_decode_plan,
)
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel


class LocalIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that shards the read stream with the boolean filter
    instead of the Triton compaction kernel (cheaper for small batches)."""

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
        if not get_parallel().dcp_enabled or spec_info is not None or init_metadata_replay:
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
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=req_pool_indices.device
        )
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        kv_indices = translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(kv_indices)
        )
        wrapper.plan(
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


class CompactedIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Same eager decode plan, sharded with plan_dcp_decode_metadata, which
    rewrites the lengths / indptr to this rank's share in place."""

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
        if not get_parallel().dcp_enabled or spec_info is not None or init_metadata_replay:
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
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=req_pool_indices.device
        )
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        # kv_lens / kv_indptr become this rank's share; kv_indices[:n] its ids.
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


class DirectPlanMLABackend(FlashInferMLAAttnBackend):
    """Decode plan issued straight on the wrapper (skips the updater)."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
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
        if get_parallel().dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
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


class DirectPlanNoDcpMLABackend(FlashInferMLAAttnBackend):
    """Direct decode plan for the non-DCP deployments; DCP keeps the stock
    updater (which shards lengths and indices per rank)."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if (
            not forward_batch.forward_mode.is_decode_or_idle()
            or get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
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
        updater = self.indices_updater_decode
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
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


class ReplayMLABackend(FlashInferMLAAttnBackend):
    """Decode graph replay without the torch.cumsum on the hot path for
    target-verify (handled by the parent)."""

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


class ReplayLocalMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_on = get_parallel().dcp_enabled

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
        if self._dcp_on:
            # The host-side arrays feed the fast plan directly: shard them.
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


class HostFastPlanMLABackend(FlashInferMLAAttnBackend):
    # expect: SG203
    def replan_decode_fast(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        """Re-plan a captured decode wrapper from host lengths only (used by
        the overlap scheduler when the batch composition did not change)."""
        wrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        updater = self.indices_updater_decode
        fast_mla_decode_plan(
            wrapper,
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
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


class HostFastPlanLocalMLABackend(FlashInferMLAAttnBackend):
    # expect: clean
    def replan_decode_fast(self, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        wrapper = self.decode_cuda_graph_metadata[bs]
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if get_parallel().dcp_enabled:
            # Shard the host lengths the same way the device ids were sharded.
            update_local_kv_lens_for_dcp(kv_len_arr_cpu)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        updater = self.indices_updater_decode
        fast_mla_decode_plan(
            wrapper,
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu,
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


class GatheredExtendMLABackend(FlashInferMLAAttnBackend):
    """Paged-MLA extend under DCP: the model all-gathers the prefix KV into
    ``attn_dcp_metadata.dcp_kv_buffer``, which forward_extend reads, so the
    plan covers whole sequences over the gathered buffer."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        dcp_metadata = forward_batch.attn_dcp_metadata
        if (
            not forward_batch.forward_mode.is_extend()
            or forward_batch.forward_mode.is_target_verify()
            or dcp_metadata is None
            or dcp_metadata.dcp_kv_buffer is None
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(seq_lens - forward_batch.extend_prefix_lens, dim=0)
        kv_indptr = dcp_metadata.dcp_kv_indptr
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        updater = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_metadata.dcp_kv_indices,
            kv_len_arr,
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

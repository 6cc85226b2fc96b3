"""Fork decode planners for FlashInfer's ``BatchMLAPagedAttentionWrapper``.

Under DCP every rank holds an interleaved slice of each request, so a decode
plan must list only this rank's pages *and* this rank's per-request lengths.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper


class _EagerDecodeUpdaterBase(FlashInferMLAIndicesUpdaterDecode):
    """Keeps upstream for spec-info and replay plans; the fork owns eager decode."""

    def _upstream(self, *args, **kwargs):
        return FlashInferMLAIndicesUpdaterDecode.call_begin_forward(self, *args, **kwargs)

    def _pack_eager_indices(self, plan, req_pool_indices, paged_kernel_lens, kv_indptr, total):
        kv_indices = torch.empty(total, dtype=torch.int32, device=paged_kernel_lens.device)
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    def _plan(self, wrapper, q_indptr, kv_indptr, kv_indices, kv_lens):
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


class ForkMLADecodeUpdater(_EagerDecodeUpdaterBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        if spec_info is not None or init_metadata_replay:
            return self._upstream(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_eager_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            # The packed stream is widened under DCP: keep this rank's slots and
            # collapse them to physical rows.
            translator = self.attn_backend.kv_index_translator
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class ForkMLADecodeUpdaterLocal(_EagerDecodeUpdaterBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward + dcp/planner.py plan_dcp_decode_metadata
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        if spec_info is not None or init_metadata_replay:
            return self._upstream(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_eager_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to this rank's share in place and
            # compacts this rank's ids to the front of kv_indices.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
            translator = self.attn_backend.kv_index_translator
            if n_local > 0:
                valid = kv_indices[:n_local]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)


class LatePlanMLAUpdater(_EagerDecodeUpdaterBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (update_local_kv_lens_for_dcp ordering)
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        if spec_info is not None or init_metadata_replay:
            return self._upstream(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._pack_eager_indices(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        dcp_enabled = get_parallel().dcp_enabled
        if dcp_enabled:
            translator = self.attn_backend.kv_index_translator
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)
        if dcp_enabled:
            # forward_decode's zero-KV fixup reads the rank-local lengths.
            update_local_kv_lens_for_dcp(kv_lens)
        self.last_kv_lens = kv_lens


class EarlyLocalizePlanUpdater(_EagerDecodeUpdaterBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp first)
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        if spec_info is not None or init_metadata_replay:
            return self._upstream(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info,
                plan=plan, req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        # Widened indptr for the gather, then shard everything before planning.
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices = self._pack_eager_indices(
            plan,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr[: bs + 1],
            paged_kernel_lens_sum,
        )
        kv_lens = paged_kernel_lens.to(torch.int32, copy=True)
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
            translator = self.attn_backend.kv_index_translator
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        kv_indptr = kv_indptr[: bs + 1]
        self._plan(wrapper, q_indptr, kv_indptr, kv_indices, kv_lens)
        self.last_kv_lens = kv_lens


class _ReplayPlannerBase:
    """Host-side replay planner for the fork's captured decode wrappers."""

    def __init__(self, model_runner: ModelRunner, backend: FlashInferMLAAttnBackend, max_bs: int):
        cfg = model_runner.model_config
        parallel = get_parallel()
        self.backend = backend
        # The DCP decode runs on the all-gathered query heads.
        self.num_heads = (
            cfg.num_attention_heads // parallel.attn_tp_size * parallel.attn_dcp_size
        )
        self.kv_lora_rank = cfg.kv_lora_rank
        self.qk_rope_head_dim = cfg.qk_rope_head_dim
        self.scaling = cfg.scaling
        self.dtype = model_runner.dtype
        self.qo_indptr_cpu = torch.arange(0, max_bs + 1, dtype=torch.int32)
        self.kv_indptr_cpu = torch.zeros(max_bs + 1, dtype=torch.int32)

    def _plan(self, wrapper, bs, kv_indices, kv_len_arr_cpu):
        wrapper.plan(
            self.qo_indptr_cpu[: bs + 1],
            self.kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.dtype,
            self.dtype,
        )


class ReplayMLADecodePlanner(_ReplayPlannerBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay fast plan)
    # expect: SG203
    def plan_replay(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        bs: int,
        seq_lens_cpu: torch.Tensor,
        kv_indices: torch.Tensor,
        dcp_local_ids: Optional[int] = None,
    ):
        # kv_indices is the capture-stable buffer, already sharded to this
        # rank by the index kernel (dcp_local_ids entries are live).
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        if get_parallel().dcp_enabled and dcp_local_ids is not None:
            assert dcp_local_ids <= kv_indices.numel()
        self._plan(wrapper, bs, kv_indices, kv_len_arr_cpu)


class ReplayMLADecodePlannerLocal(_ReplayPlannerBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp)
    # expect: clean
    def plan_replay(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        bs: int,
        seq_lens_cpu: torch.Tensor,
        kv_indices: torch.Tensor,
        dcp_local_ids: Optional[int] = None,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32, copy=True)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        if get_parallel().dcp_enabled and dcp_local_ids is not None:
            assert dcp_local_ids <= kv_indices.numel()
        self._plan(wrapper, bs, kv_indices, kv_len_arr_cpu)

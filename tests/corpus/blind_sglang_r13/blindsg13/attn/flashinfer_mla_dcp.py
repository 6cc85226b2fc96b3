"""FlashInfer-MLA (BatchMLAPagedAttentionWrapper) planning under DCP.

The fork plans the MLA wrappers itself in a few places (canonical
``MLAPlanMetadata`` plans, a replay fast path, a verify wrapper) instead of
going through the upstream indices updaters.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper
    from flashinfer.mla import MLAPlanMetadata

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class LocalFilterMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that drops non-local KV ids before planning."""

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
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
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
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


class ShardedMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that shards lengths, indptr and indices together."""

    # expect: clean
    def call_begin_forward(
        self,
        wrapper: "BatchMLAPagedAttentionWrapper",
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan: "KVLocPlan",
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
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
        n_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr to the rank-local view in place.
            n_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if n_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
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


class ForkFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer-MLA backend with fork-local wrapper plans."""

    @property
    def _upd(self) -> FlashInferMLAIndicesUpdaterDecode:
        return self.indices_updater_decode

    def _decode_indices(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=self.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return bs, self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices

    def _plan_kwargs(self, causal: bool = False) -> dict:
        upd = self._upd
        return dict(
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=causal,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
        )

    # expect: SG203
    def plan_decode_canonical(self, forward_batch: "ForwardBatch"):
        bs, qo_indptr, kv_indptr, kv_indices = self._decode_indices(forward_batch)
        metadata = MLAPlanMetadata.csr(
            qo_indptr,
            kv_indptr,
            kv_indices,
            forward_batch.seq_lens[:bs].to(torch.int32),
        )
        self.decode_wrapper.plan(metadata=metadata, **self._plan_kwargs())
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: clean
    def plan_decode_canonical_sharded(self, forward_batch: "ForwardBatch"):
        bs, qo_indptr, kv_indptr, kv_indices = self._decode_indices(forward_batch)
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if get_parallel().dcp_enabled:
            plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        metadata = MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lens)
        self.decode_wrapper.plan(metadata=metadata, **self._plan_kwargs())
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
    def plan_decode_from_indptr(self, forward_batch: "ForwardBatch"):
        parallel = get_parallel()
        bs, qo_indptr, kv_indptr, kv_indices = self._decode_indices(forward_batch)
        if parallel.dcp_enabled:
            kv_indices = kv_indices[kv_indices % parallel.dcp_size == parallel.dcp_rank]
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        self.decode_wrapper.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            self._upd.num_local_heads,
            self._upd.kv_lora_rank,
            self._upd.qk_rope_head_dim,
            1,
            False,
            self._upd.scaling,
            self._upd.data_type,
            self._upd.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: clean
    def plan_decode_when_dcp_off(self, forward_batch: "ForwardBatch"):
        """Fast path for plain TP; DCP goes through the upstream updater,
        which shards lengths with plan_dcp_decode_metadata."""
        if get_parallel().attn_dcp_size > 1:
            return super().init_forward_metadata(forward_batch)
        bs, qo_indptr, kv_indptr, kv_indices = self._decode_indices(forward_batch)
        self.decode_wrapper.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            forward_batch.seq_lens[:bs].to(torch.int32),
            self._upd.num_local_heads,
            self._upd.kv_lora_rank,
            self._upd.qk_rope_head_dim,
            1,
            False,
            self._upd.scaling,
            self._upd.data_type,
            self._upd.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: SG203
    def replay_decode_plan(self, bs: int, seq_lens_cpu: torch.Tensor):
        """Sync-free re-plan of the captured decode wrapper on replay."""
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indices,
            kv_len_arr_cpu,
            self._upd.num_local_heads,
            self._upd.kv_lora_rank,
            self._upd.qk_rope_head_dim,
            1,
            False,
            self._upd.scaling,
            self._upd.data_type,
            self._upd.data_type,
        )

    # expect: clean
    def replay_decode_plan_local(self, bs: int, seq_lens_cpu: torch.Tensor):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        wrapper = self.decode_cuda_graph_metadata[bs]
        wrapper.plan(
            self.cuda_graph_qo_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indptr_cpu[: bs + 1],
            self.cuda_graph_kv_indices,
            kv_len_arr_cpu,
            self._upd.num_local_heads,
            self._upd.kv_lora_rank,
            self._upd.qk_rope_head_dim,
            1,
            False,
            self._upd.scaling,
            self._upd.data_type,
            self._upd.data_type,
        )

    # expect: SG203
    def plan_verify_dcp(self, forward_batch: "ForwardBatch"):
        """Target-verify plan on the MLA verify wrapper."""
        spec_info = forward_batch.spec_info
        bs = forward_batch.batch_size
        ndt = spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        kv_indices, kv_indptr, qo_indptr, _ = spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.indices_updater_prefill.num_local_heads,
            self.indices_updater_prefill.kv_lora_rank,
            self.indices_updater_prefill.qk_rope_head_dim,
            1,
            True,
            self.indices_updater_prefill.scaling,
            self.indices_updater_prefill.q_data_type,
            self.indices_updater_prefill.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # expect: clean
    def plan_verify_no_dcp(self, forward_batch: "ForwardBatch"):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "flashinfer_mla target verify under DCP needs a global causal "
                "bound; not supported by this wrapper"
            )
        spec_info = forward_batch.spec_info
        bs = forward_batch.batch_size
        kv_lens = (forward_batch.seq_lens[:bs] + spec_info.draft_token_num).to(
            torch.int32
        )
        kv_indices, kv_indptr, qo_indptr, _ = spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.indices_updater_prefill.num_local_heads,
            self.indices_updater_prefill.kv_lora_rank,
            self.indices_updater_prefill.qk_rope_head_dim,
            1,
            True,
            self.indices_updater_prefill.scaling,
            self.indices_updater_prefill.q_data_type,
            self.indices_updater_prefill.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # expect: SG203
    def plan_decode_partial(self, forward_batch: "ForwardBatch"):
        bs, qo_indptr, kv_indptr, kv_indices = self._decode_indices(forward_batch)
        plan = functools.partial(
            self.decode_wrapper.plan,
            kv_len_arr=forward_batch.seq_lens[:bs].to(torch.int32),
            **self._plan_kwargs(),
        )
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        plan(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices)
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # expect: clean
    def plan_extend_with_gathered_kv(self, forward_batch: "ForwardBatch"):
        """Paged MLA extend plan under DCP: the model all-gathers this step's
        prefix KV into ``attn_dcp_metadata.dcp_kv_buffer``, so the plan walks
        the gathered (whole-sequence) buffer through ``dcp_kv_indptr``."""
        dcp_meta = forward_batch.attn_dcp_metadata
        if dcp_meta is None or dcp_meta.dcp_kv_indptr is None:
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens[:bs], dim=0)
        kv_indptr = dcp_meta.dcp_kv_indptr
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_meta.dcp_kv_indices,
            kv_len_arr,
            self.indices_updater_prefill.num_local_heads,
            self.indices_updater_prefill.kv_lora_rank,
            self.indices_updater_prefill.qk_rope_head_dim,
            1,
            True,
            self.indices_updater_prefill.scaling,
            self.indices_updater_prefill.q_data_type,
            self.indices_updater_prefill.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

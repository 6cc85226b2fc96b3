"""FlashInfer MLA (BatchMLAPagedAttentionWrapper) planning variants.

The fork moves the decode plan to flashinfer's canonical ``MLAPlanMetadata``
forms and adds a staged plan (built on the scheduler thread, committed on the
forward stream).  Legacy positional plans are kept where upstream still uses
them.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
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
from sglang.srt.utils import is_flashinfer_available

from blindsg14.attn.dcp_lens import rank_local_lens

if is_flashinfer_available():
    from flashinfer.mla import MLAPlanMetadata


# --------------------------------------------------------------------------
# indices updater (legacy positional plan)
# --------------------------------------------------------------------------
class OwnerFilterIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Owner-rule filter instead of the compacting planner kernel."""

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
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=req_pool_indices.device
        )
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            # Keep only the slots this rank owns (slot % dcp_size == rank).
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


class CompactingIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
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
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            paged_kernel_lens_sum, dtype=torch.int32, device=req_pool_indices.device
        )
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        kv_lens = paged_kernel_lens.to(torch.int32)
        n_local = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr / kv_indices to this rank's shard.
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices[:n_local],
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


# --------------------------------------------------------------------------
# backends planning the decode wrapper directly
# --------------------------------------------------------------------------
class _ForkFlashInferMLABase(FlashInferMLAAttnBackend):
    def _plan_dims(self) -> dict:
        upd = self.indices_updater_decode
        return dict(
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
        )

    def _pack_csr(self, forward_batch: ForwardBatch, lens: torch.Tensor):
        bs = forward_batch.batch_size
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(lens, dim=0)
        kv_indices = torch.empty(
            int(forward_batch.seq_lens_sum), dtype=torch.int32, device=lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices

    def _collapse(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Widened DCP read ids -> this rank's physical rows."""
        translator = self.kv_index_translator
        if translator.needs_read_translate:
            return translator.translate_dcp_read_ids(kv_indices)
        return kv_indices

    @staticmethod
    def _dense_from_csr(kv_indptr, kv_indices, bs: int, width: int):
        table = torch.zeros((bs, width), dtype=torch.int32, device=kv_indices.device)
        starts = kv_indptr[:bs].tolist()
        lens = (kv_indptr[1 : bs + 1] - kv_indptr[:bs]).tolist()
        for row, (start, n) in enumerate(zip(starts, lens)):
            table[row, :n] = kv_indices[start : start + n]
        return table


class CsrPlanFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        kv_indptr, kv_indices = self._pack_csr(forward_batch, seq_lens)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=seq_lens.to(torch.int32),
            ),
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class CsrShardedFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = self._collapse(kv_indices[:n_local])
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=kv_lens,
            ),
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class DensePlanFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        local_lens = kv_lens.clone()
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                local_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = self._collapse(kv_indices[:n_local])
        block_tables = self._dense_from_csr(
            kv_indptr, kv_indices, bs, self.max_context_len
        )
        self.decode_wrapper.plan(
            cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
            block_tables=block_tables,
            seq_lens=kv_lens,
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class DenseLocalPlanFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        parallel = get_parallel()
        bs = forward_batch.batch_size
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if parallel.dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                forward_batch.seq_lens.to(torch.int32), kv_indptr, kv_indices,
                False, {}, bs,
            )
            kv_indices = self._collapse(kv_indices[:n_local])
            seq_lens = get_dcp_lens(
                forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        else:
            seq_lens = forward_batch.seq_lens.to(torch.int32)
        block_tables = self._dense_from_csr(
            kv_indptr, kv_indices, bs, self.max_context_len
        )
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.dense(
                cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
                block_tables=block_tables,
                seq_lens=seq_lens,
            ),
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class IndptrLensFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        # FlashInfer >= 0.7 checks kv_len_arr against kv_indptr: derive one
        # from the other so they can never disagree.
        kv_len_arr = (kv_indptr[1 : bs + 1] - kv_indptr[:bs]).to(torch.int32)
        dims = self._plan_dims()
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_arr,
            dims["num_heads"],
            dims["head_dim_ckv"],
            dims["head_dim_kpe"],
            dims["page_size"],
            dims["causal"],
            dims["sm_scale"],
            dims["q_data_type"],
            dims["kv_data_type"],
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class SingleRankPlanFlashInferMLABackend(_ForkFlashInferMLABase):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if get_parallel().dcp_enabled or not forward_batch.forward_mode.is_decode_or_idle():
            # DCP planning (compaction + rank-local lens) stays upstream's.
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=forward_batch.seq_lens.to(torch.int32),
            ),
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class GatheredPrefixExtendFlashInferMLABackend(_ForkFlashInferMLABase):
    """Paged MLA prefill over the DCP all-gathered KV buffer."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        dcp_md = forward_batch.attn_dcp_metadata
        mode = forward_batch.forward_mode
        if (
            dcp_md is None
            or mode.is_decode_or_idle()
            or mode.is_target_verify()
            or mode.is_draft_extend_v2()
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        # dcp_kv_indptr indexes the gathered buffer, which holds every rank's
        # share of the prefix plus the new tokens: whole-sequence lengths are
        # the right ones here.
        kv_indptr = dcp_md.dcp_kv_indptr
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        upd = self.indices_updater_prefill
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_md.dcp_kv_indices,
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


# --------------------------------------------------------------------------
# CUDA-graph replay
# --------------------------------------------------------------------------
class ReplayFastPlanFlashInferMLABackend(_ForkFlashInferMLABase):
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
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
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
            **self.fast_decode_kwargs,
        )


class PinnedReplayFlashInferMLABackend(_ForkFlashInferMLABase):
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
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        kv_len_arr_cpu = torch.empty((bs,), dtype=torch.int32, pin_memory=True)
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
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
            **self.fast_decode_kwargs,
        )


# --------------------------------------------------------------------------
# staged plans (built on the scheduler thread, committed on the forward)
# --------------------------------------------------------------------------
class _StagedPlanMixin:
    _staged_plan: Optional[dict] = None

    # expect: SG203
    def commit_decode_plan(self):
        staged = self._staged_plan
        self._staged_plan = None
        self.decode_wrapper.plan(**staged, **self._plan_dims())
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class StagedPlanFlashInferMLABackend(_StagedPlanMixin, _ForkFlashInferMLABase):
    def stage_decode_plan(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens.clone(), kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = self._collapse(kv_indices[:n_local])
        self._staged_plan = {
            "metadata": MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=kv_lens,
            )
        }


class StagedLocalPlanFlashInferMLABackend(_ForkFlashInferMLABase):
    _staged_local_plan: Optional[dict] = None

    def stage_decode_plan(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if get_parallel().dcp_enabled:
            n_local = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            kv_indices = self._collapse(kv_indices[:n_local])
        self._staged_local_plan = {
            "metadata": MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=kv_lens,
            )
        }

    # expect: clean
    def commit_local_decode_plan(self):
        staged = self._staged_local_plan
        self._staged_local_plan = None
        self.decode_wrapper.plan(**staged, **self._plan_dims())
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)


class RankLocalCsrFlashInferMLABackend(_ForkFlashInferMLABase):
    """Plans over this rank's page list built by the KV pool's DCP reader."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_lens = rank_local_lens(forward_batch.seq_lens)
        kv_indptr, kv_indices = self._pack_csr(forward_batch, forward_batch.seq_lens)
        if get_parallel().dcp_enabled:
            kv_indices = self._collapse(filter_dcp_local_kv_indices(kv_indices))
            kv_indptr = self.kv_indptr[: bs + 1]
            kv_indptr[1:] = torch.cumsum(local_lens, dim=0)
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                qo_indptr=self.q_indptr_decode[: bs + 1],
                kv_indptr=kv_indptr,
                kv_indices=kv_indices,
                kv_len_arr=local_lens,
            ),
            **self._plan_dims(),
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

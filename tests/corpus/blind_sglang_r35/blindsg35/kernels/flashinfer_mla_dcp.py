"""FlashInfer MLA wrapper (``BatchMLAPagedAttentionWrapper``) under DCP,
planned through the canonical ``MLAPlanMetadata`` form of FlashInfer 0.7.

The wrapper's ``plan`` has no DCP arguments: it must receive this rank's share
of each KV length, and it cannot bound a multi-token query globally.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import torch
from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

from sglang.kernels.ops.attention.dcp_kernels import create_mla_kv_page_table_for_dcp
from sglang.kernels.ops.attention.kv_indices import (
    get_num_kv_index_blocks_flashmla,
    get_num_page_per_block_flashmla,
)
from sglang.srt.distributed.parallel_state import get_dcp_group
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg35.kernels.dcp_view import DcpView
from blindsg35.kernels.lens import rank_local_lens

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.speculative.spec_info import SpecInput

logger = logging.getLogger(__name__)

_DENSE_PAGE_SIZE = 64


def _plan_kwargs(updater, *, causal: bool) -> dict:
    return dict(
        num_heads=updater.num_local_heads,
        head_dim_ckv=updater.kv_lora_rank,
        head_dim_kpe=updater.qk_rope_head_dim,
        page_size=1,
        causal=causal,
        sm_scale=updater.scaling,
        q_data_type=updater.data_type,
        kv_data_type=updater.data_type,
    )


class CloudFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode plan fed from host-side arrays (no D2H of the device
    lengths), with one pinned host buffer pair cached per batch size."""

    def __init__(self, model_runner, attn_backend):
        super().__init__(model_runner, attn_backend)
        self._host_plan_bufs: Dict[int, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _host_bufs(self, bs: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bufs = self._host_plan_bufs.get(bs)
        if bufs is None:
            bufs = (
                torch.arange(0, bs + 1, dtype=torch.int32).pin_memory(),
                torch.zeros((bs + 1,), dtype=torch.int32).pin_memory(),
                torch.zeros((bs,), dtype=torch.int32).pin_memory(),
            )
            self._host_plan_bufs[bs] = bufs
        return bufs

    def _pack(self, plan, req_pool_indices, paged_kernel_lens, kv_indptr, kv_indices) -> bool:
        return self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )

    def _translate(self, kv_indices: torch.Tensor, n_kernel_ids: int, is_translated: bool) -> None:
        translator = self.attn_backend.kv_index_translator
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))

    def _device_ids(self, plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr, fast_decode_kwargs):
        """Pack the read ids; under DCP compact this rank's ids to the front."""
        bs = len(paged_kernel_lens)
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        is_translated = self._pack(plan, req_pool_indices, paged_kernel_lens, kv_indptr, kv_indices)
        n_kernel_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        self._translate(kv_indices, n_kernel_ids, is_translated)
        return kv_indices

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        seq_lens_cpu = fast_decode_kwargs.pop("seq_lens_cpu", None)
        if init_metadata_replay or spec_info is not None or seq_lens_cpu is None:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_indices = self._device_ids(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum,
            kv_indptr, fast_decode_kwargs,
        )
        qo_indptr_host, kv_indptr_host, kv_len_host = self._host_bufs(bs)
        # Host mirror of the lengths: the plan reads these instead of syncing
        # on the device kv_indptr.
        kv_len_host.copy_(seq_lens_cpu[:bs])
        torch.cumsum(kv_len_host, dim=0, out=kv_indptr_host[1:])
        wrapper.plan(
            metadata=MLAPlanMetadata.csr(qo_indptr_host, kv_indptr_host, kv_indices, kv_len_host),
            **_plan_kwargs(self, causal=False),
        )


class RegionalFlashInferMLAIndicesUpdaterDecode(CloudFlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
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
        seq_lens_cpu = fast_decode_kwargs.pop("seq_lens_cpu", None)
        if init_metadata_replay or spec_info is not None or seq_lens_cpu is None:
            return FlashInferMLAIndicesUpdaterDecode.call_begin_forward(
                self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                kv_indptr, init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        kv_indices = self._device_ids(
            plan, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum,
            kv_indptr, fast_decode_kwargs,
        )
        qo_indptr_host, kv_indptr_host, kv_len_host = self._host_bufs(bs)
        kv_len_host.copy_(seq_lens_cpu[:bs])
        # Same per-rank rule as plan_dcp_decode_metadata applied on device
        # (no-op without DCP).
        update_local_kv_lens_for_dcp(kv_len_host)
        torch.cumsum(kv_len_host, dim=0, out=kv_indptr_host[1:])
        wrapper.plan(
            metadata=MLAPlanMetadata.csr(qo_indptr_host, kv_indptr_host, kv_indices, kv_len_host),
            **_plan_kwargs(self, causal=False),
        )


class CloudFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, skip_prefill: bool = False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.indices_updater_decode = self._make_decode_updater(model_runner)
        # Dense page-table decode wrapper (CUTLASS consumes dense metadata).
        self.dense_decode_wrapper = BatchMLAPagedAttentionWrapper(
            self.workspace_buffer, backend="cutlass"
        )

    def _make_decode_updater(self, model_runner):
        return CloudFlashInferMLAIndicesUpdaterDecode(model_runner, self)

    def _dense_block_table(
        self, forward_batch: ForwardBatch, local_seq_lens: torch.Tensor, view: DcpView
    ) -> torch.Tensor:
        bs = forward_batch.batch_size
        max_pages = (self.max_context_len + _DENSE_PAGE_SIZE - 1) // _DENSE_PAGE_SIZE
        block_table = torch.full((bs, max_pages), -1, dtype=torch.int32, device=self.device)
        v2p = self.kv_index_translator.full_v2p_table
        create_mla_kv_page_table_for_dcp[
            (bs, get_num_kv_index_blocks_flashmla(max_pages, _DENSE_PAGE_SIZE))
        ](
            self.req_to_token_pool.req_to_token,
            forward_batch.req_pool_indices,
            local_seq_lens,
            block_table,
            v2p,
            self.req_to_token_pool.req_to_token.stride(0),
            block_table.stride(0),
            PHYSICAL_PAGE_SIZE=_DENSE_PAGE_SIZE,
            DCP_SIZE=view.size,
            DCP_RANK=view.rank,
            PAGES_PER_BLOCK=get_num_page_per_block_flashmla(_DENSE_PAGE_SIZE),
            HAS_V2P=v2p is not None,
        )
        return block_table

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        if get_parallel().dcp_enabled:
            # Sanity check on a scratch copy; the fast plan keeps the host
            # array it was captured with.
            scratch = kv_len_arr_cpu.clone()
            update_local_kv_lens_for_dcp(scratch)
            assert int(scratch.sum()) <= int(kv_len_arr_cpu.sum())
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target verify)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle() and forward_batch.seq_lens_cpu is not None:
            self.indices_updater_decode.update(
                forward_batch.seq_lens,
                forward_batch.seq_lens_sum,
                decode_wrapper=self.decode_wrapper,
                init_metadata_replay=False,
                req_pool_indices=forward_batch.req_pool_indices,
                plan=forward_batch.kv_loc_plan,
                seq_lens_cpu=forward_batch.seq_lens_cpu,
            )
            self.forward_metadata = DecodeMetadata(self.decode_wrapper)
            return
        if not mode.is_target_verify():
            return super().init_forward_metadata(forward_batch)
        kv_indices, kv_indptr, qo_indptr, _ = forward_batch.spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )
        kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        self.prefill_wrapper_verify.plan(
            metadata=MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr),
            **_plan_kwargs(self.indices_updater_prefill, causal=True),
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (draft extend fast plan)
    # expect: SG203
    def plan_draft_extend(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        num_tokens_per_req = forward_batch.spec_info.num_tokens_per_req
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            int(forward_batch.seq_lens_sum), dtype=torch.int32, device=self.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, {}, bs
            )
            translator = self.kv_index_translator
            if n_kernel_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_kernel_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        qo_indptr = torch.arange(
            0, (bs + 1) * num_tokens_per_req, num_tokens_per_req,
            dtype=torch.int32, device=self.device,
        )
        self.prefill_wrapper_paged.plan(
            metadata=MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lens),
            **_plan_kwargs(self.indices_updater_prefill, causal=True),
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (dense metadata)
    # expect: SG203
    def plan_decode_dense(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        view = DcpView.from_parallel()
        local = rank_local_lens(forward_batch.seq_lens, view)
        block_table = self._dense_block_table(forward_batch, local, view)
        self.dense_decode_wrapper.plan(
            metadata=MLAPlanMetadata.dense(
                cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
                block_tables=block_table,
                seq_lens=forward_batch.seq_lens.to(torch.int32),
                max_q_len=1,
            ),
            num_heads=self.indices_updater_decode.num_local_heads,
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=_DENSE_PAGE_SIZE,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
            lse_mode="base2" if view.enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.dense_decode_wrapper)


class RegionalFlashInferMLAAttnBackend(CloudFlashInferMLAAttnBackend):
    def _make_decode_updater(self, model_runner):
        return RegionalFlashInferMLAIndicesUpdaterDecode(model_runner, self)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: "KVLocPlan",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional["SpecInput"],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return FlashInferMLAAttnBackend._apply_cuda_graph_metadata(
                self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                forward_mode, spec_info, seq_lens_cpu, in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        # In place: the fast plan and plan_dcp_decode_metadata both read this
        # host array as the per-rank lengths.
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target verify)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "BatchMLAPagedAttentionWrapper takes no global causal bound: "
                "target verify under DCP needs cutedsl_mla"
            )
        return super().init_forward_metadata(forward_batch)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (draft extend fast plan)
    # expect: clean
    def plan_draft_extend(self, forward_batch: ForwardBatch) -> None:
        assert not get_parallel().dcp_enabled, (
            "multi-token draft extend on the FlashInfer MLA wrapper is refused under DCP"
        )
        bs = forward_batch.batch_size
        num_tokens_per_req = forward_batch.spec_info.num_tokens_per_req
        kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            int(forward_batch.seq_lens_sum), dtype=torch.int32, device=self.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=kv_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        qo_indptr = torch.arange(
            0, (bs + 1) * num_tokens_per_req, num_tokens_per_req,
            dtype=torch.int32, device=self.device,
        )
        self.prefill_wrapper_paged.plan(
            metadata=MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lens),
            **_plan_kwargs(self.indices_updater_prefill, causal=True),
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (dense metadata)
    # expect: clean
    def plan_decode_dense(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        view = DcpView.from_group(get_dcp_group()) if get_parallel().dcp_enabled else DcpView()
        local = rank_local_lens(forward_batch.seq_lens, view)
        block_table = self._dense_block_table(forward_batch, local, view)
        self.dense_decode_wrapper.plan(
            metadata=MLAPlanMetadata.dense(
                cum_seq_lens_q=self.q_indptr_decode[: bs + 1],
                block_tables=block_table,
                seq_lens=local,
                max_q_len=1,
            ),
            num_heads=self.indices_updater_decode.num_local_heads,
            head_dim_ckv=self.indices_updater_decode.kv_lora_rank,
            head_dim_kpe=self.indices_updater_decode.qk_rope_head_dim,
            page_size=_DENSE_PAGE_SIZE,
            causal=False,
            sm_scale=self.indices_updater_decode.scaling,
            q_data_type=self.indices_updater_decode.data_type,
            kv_data_type=self.indices_updater_decode.data_type,
            lse_mode="base2" if view.enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.dense_decode_wrapper)

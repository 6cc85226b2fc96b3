"""Fork FlashInfer MLA backend / indices updaters (BatchMLAPagedAttentionWrapper plans)."""

from __future__ import annotations

import logging
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
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer.mla import MLAPlanMetadata

logger = logging.getLogger(__name__)


class ForkFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode plan that filters the page list to this DCP rank."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (DCP page filter, wrapper.plan)
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
        kv_lens = paged_kernel_lens.to(torch.int32)
        if get_parallel().dcp_enabled:
            # This rank only holds loc % dcp_size == dcp_rank.
            kv_indices = translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
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


class DcpFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Same eager plan, sharded with SGLang's plan_dcp_decode_metadata."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (plan_dcp_decode_metadata before wrapper.plan)
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
            # Rewrites kv_lens / kv_indptr in place to this rank's share.
            n_kernel_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_kernel_ids]
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


class SpecFlashInferMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """EAGLE draft-decode plan from the multi-step backend's per-step CSR."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward (spec_info branch: kv_lens from spec kv_indptr)
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
        if spec_info is None or init_metadata_replay:
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
        kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
        kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
        if get_parallel().dcp_enabled:
            # Draft ids are widened (virtual) under DCP: collapse to physical rows.
            kv_indices = self.attn_backend.kv_index_translator.translate_dcp_read_ids(
                kv_indices
            )
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


class ForkFlashInferMLAAttnBackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA with the fork's sync-free decode replay."""

    def _csr_decode_inputs(self, forward_batch: ForwardBatch, kv_lens: torch.Tensor):
        bs = forward_batch.batch_size
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=kv_lens.device
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay fast plan)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        # Host-side plan arrays: no D2H on the replay path.
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

    # idiom: flashinfer/mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.csr(...)) replacing FlashInferMLAAttnBackend.init_forward_metadata (decode)
    # expect: SG203
    def plan_decode_wrapper(self, forward_batch: ForwardBatch):
        upd = self.indices_updater_decode
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._csr_decode_inputs(forward_batch, kv_lens)
        dcp_enabled = get_parallel().dcp_enabled
        if dcp_enabled:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_lens
            ),
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
            query_layout="split",
            kv_cache_layout="split",
            lse_mode="basee" if dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (target-verify paged plan, causal=True) under DCP
    # expect: SG203
    def plan_verify_wrapper(self, forward_batch: ForwardBatch):
        upd = self.indices_updater_prefill
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        verify_lens = forward_batch.seq_lens[:bs] + draft_token_num
        device = verify_lens.device
        qo_indptr = torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=device
        )
        kv_lens = verify_lens.to(torch.int32)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(verify_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum + bs * draft_token_num,
            dtype=torch.int32,
            device=device,
        )
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=verify_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            kv_indices[:n_ids] = self.kv_index_translator.translate_dcp_read_ids(
                kv_indices[:n_ids]
            )
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
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

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (attn_dcp_metadata: paged prefill over the all-gathered dcp_kv_buffer)
    # expect: clean
    def plan_dcp_prefill(self, forward_batch: ForwardBatch):
        dcp_metadata = forward_batch.attn_dcp_metadata
        if dcp_metadata is None or dcp_metadata.dcp_kv_indptr is None:
            if get_parallel().dcp_enabled:
                raise RuntimeError(
                    "DCP prefill needs attn_dcp_metadata "
                    "(prepare_context_parallel_metadata_for_dcp)"
                )
            return self.init_forward_metadata(forward_batch)
        upd = self.indices_updater_prefill
        bs = forward_batch.batch_size
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        # dcp_kv_indptr / dcp_kv_indices index the all-gathered dcp_kv_buffer,
        # which forward_extend reads instead of this rank's pool: the whole
        # sequences are present there.
        kv_indptr = dcp_metadata.dcp_kv_indptr
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_metadata.dcp_kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
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


class DcpFlashInferMLAAttnBackend(ForkFlashInferMLAAttnBackend):
    """The fork's replay / plan paths with the DCP sharding applied."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (update_local_kv_lens_for_dcp before the fast plan)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture=in_capture,
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

    # idiom: flashinfer/mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.csr(...)) with plan_dcp_decode_metadata sharding
    # expect: clean
    def plan_decode_wrapper(self, forward_batch: ForwardBatch):
        upd = self.indices_updater_decode
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = self._csr_decode_inputs(forward_batch, kv_lens)
        dcp_enabled = get_parallel().dcp_enabled
        if dcp_enabled:
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices[:n_ids])
        self.decode_wrapper.plan(
            metadata=MLAPlanMetadata.csr(
                self.q_indptr_decode[: bs + 1], kv_indptr, kv_indices, kv_lens
            ),
            num_heads=upd.num_local_heads,
            head_dim_ckv=upd.kv_lora_rank,
            head_dim_kpe=upd.qk_rope_head_dim,
            page_size=1,
            causal=False,
            sm_scale=upd.scaling,
            q_data_type=upd.data_type,
            kv_data_type=upd.data_type,
            query_layout="split",
            kv_cache_layout="split",
            lse_mode="basee" if dcp_enabled else "none",
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel refusal, applied to the FlashInfer MLA verify plan
    # expect: clean
    def plan_verify_wrapper(self, forward_batch: ForwardBatch):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "FlashInfer MLA target-verify cannot take a global causal bound "
                "under DCP; use cutedsl_mla"
            )
        super().plan_verify_wrapper(forward_batch)

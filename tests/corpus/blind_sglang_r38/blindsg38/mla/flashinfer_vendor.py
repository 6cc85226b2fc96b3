"""Kestrel glue for FlashInfer's MLA wrapper (BatchMLAPagedAttentionWrapper).

Kestrel ships its MLA decode through FlashInfer's wrapper API; these classes
subclass SGLang's FlashInfer-MLA backend / indices updater and add the dense
page-table planning path used by the Kestrel cutlass build.
"""

from __future__ import annotations

from typing import Optional

import torch

from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.spec_info import SpecInput

from blindsg38 import lens_utils
from blindsg38.mla import register_mla_backend


class KestrelMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
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
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        if spec_info is None:
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
            if get_parallel().dcp_enabled:
                kv_indices = filter_dcp_local_kv_indices(kv_indices)
            if not is_translated and translator.needs_read_translate:
                kv_indices = translator.translate_dcp_read_ids(kv_indices)
        else:
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)

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


class KestrelMLAIndicesUpdaterDecodeDCP(FlashInferMLAIndicesUpdaterDecode):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(
        self,
        wrapper: BatchMLAPagedAttentionWrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info: Optional[SpecInput] = None,
        *,
        plan: KVLocPlan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        if spec_info is None:
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
                n_kernel_ids = plan_dcp_decode_metadata(
                    kv_lens,
                    kv_indptr,
                    kv_indices,
                    init_metadata_replay,
                    fast_decode_kwargs,
                    bs,
                )
            if not is_translated and n_kernel_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_kernel_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
        else:
            if get_parallel().dcp_enabled:
                raise NotImplementedError(
                    "Kestrel FlashInfer-MLA draft decode does not shard the "
                    "spec_info KV stream across DCP ranks."
                )
            kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            if not init_metadata_replay:
                kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)

        if not init_metadata_replay:
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
        else:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )


@register_mla_backend("kestrel_flashinfer_mla")
class KestrelFlashInferMLABackend(FlashInferMLAAttnBackend):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
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

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (host lens helper)
    # expect: clean
    def _replan_decode_fast(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
    ):
        kv_len_arr_cpu = lens_utils.local_lens_cpu_inplace(
            seq_lens_cpu[:bs].to(torch.int32)
        )
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        self.fast_decode_kwargs.update(
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=kv_indptr_cpu,
            kv_len_arr_cpu=kv_len_arr_cpu,
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=None,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (host lens helper)
    # expect: SG203
    def _replan_decode_fast_copy(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu.clone())
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
        self.fast_decode_kwargs.update(
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=kv_indptr_cpu,
            kv_len_arr_cpu=kv_len_arr_cpu,
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=None,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )


@register_mla_backend("kestrel_flashinfer_mla_dcp")
class KestrelFlashInferMLABackendDCP(KestrelFlashInferMLABackend):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInput],
        seq_lens_cpu: Optional[torch.Tensor],
        in_capture: bool = False,
    ):
        if not forward_mode.is_decode_or_idle():
            return FlashInferMLAAttnBackend._apply_cuda_graph_metadata(
                self,
                plan,
                bs,
                req_pool_indices,
                seq_lens,
                seq_lens_sum,
                forward_mode,
                spec_info,
                seq_lens_cpu,
                in_capture=in_capture,
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


def _dense_block_table(
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
    kv_lens: torch.Tensor,
    extra_tokens: int = 0,
):
    bs = forward_batch.batch_size
    max_seq = (
        int(forward_batch.seq_lens_cpu.max().item())
        if forward_batch.seq_lens_cpu is not None
        else backend.max_context_len
    )
    return backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq + extra_tokens),
        forward_batch.req_pool_indices,
        kv_lens,
        kv_lens.device,
    )


def _plan_dense(wrapper, backend, metadata: MLAPlanMetadata, *, causal: bool, lse: bool):
    wrapper.plan(
        metadata=metadata,
        num_heads=backend.num_q_heads,
        head_dim_ckv=backend.kv_lora_rank,
        head_dim_kpe=backend.qk_rope_head_dim,
        page_size=backend.page_size,
        causal=causal,
        sm_scale=backend.scaling,
        q_data_type=backend.q_data_type,
        kv_data_type=backend.data_type,
        lse_mode="basee" if lse else "none",
    )


# idiom: flashinfer/mla/_batch_mla/_wrapper.py BatchMLAPagedAttentionWrapper.plan (MLAPlanMetadata.dense, decode)
# expect: clean
def plan_dense_decode(
    wrapper: BatchMLAPagedAttentionWrapper,
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    block_tables = _dense_block_table(backend, forward_batch, forward_batch.seq_lens)
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=backend.q_indptr_decode[: bs + 1],
        block_tables=block_tables,
        seq_lens=lens_utils.seq_lens_for_kernel(forward_batch),
        max_q_len=1,
    )
    _plan_dense(wrapper, backend, metadata, causal=False, lse=get_parallel().dcp_enabled)
    return metadata


# idiom: flashinfer/mla/_batch_mla/_wrapper.py BatchMLAPagedAttentionWrapper.plan (MLAPlanMetadata.dense, decode)
# expect: SG203
def plan_dense_decode_cached(
    wrapper: BatchMLAPagedAttentionWrapper,
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    block_tables = _dense_block_table(backend, forward_batch, forward_batch.seq_lens)
    seq_lens_i32 = forward_batch.seq_lens.to(torch.int32)
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=backend.q_indptr_decode[: bs + 1],
        block_tables=block_tables,
        seq_lens=seq_lens_i32,
        max_q_len=1,
    )
    _plan_dense(wrapper, backend, metadata, causal=False, lse=get_parallel().dcp_enabled)
    return metadata


# idiom: flashinfer/mla/_batch_mla/_wrapper.py BatchMLAPagedAttentionWrapper.plan (MLAPlanMetadata.dense, target verify)
# expect: SG203
def plan_dense_verify(
    wrapper: BatchMLAPagedAttentionWrapper,
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    kv_lens = lens_utils.verify_kv_lens(forward_batch.seq_lens, draft_token_num)
    block_tables = _dense_block_table(backend, forward_batch, kv_lens, draft_token_num)
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=kv_lens.device
        ),
        block_tables=block_tables,
        seq_lens=lens_utils.rank_local_lens(kv_lens),
        max_q_len=draft_token_num,
    )
    _plan_dense(wrapper, backend, metadata, causal=True, lse=get_parallel().dcp_enabled)
    return metadata


# idiom: flashinfer/mla/_batch_mla/_wrapper.py BatchMLAPagedAttentionWrapper.plan (MLAPlanMetadata.dense, target verify)
# expect: clean
def plan_dense_verify_checked(
    wrapper: BatchMLAPagedAttentionWrapper,
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
):
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "BatchMLAPagedAttentionWrapper takes no global causal bound; a DCP "
            "target verify must run on kestrel_cutedsl_mla."
        )
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    kv_lens = lens_utils.verify_kv_lens(forward_batch.seq_lens, draft_token_num)
    block_tables = _dense_block_table(backend, forward_batch, kv_lens, draft_token_num)
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=torch.arange(
            0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=kv_lens.device
        ),
        block_tables=block_tables,
        seq_lens=lens_utils.rank_local_lens(kv_lens),
        max_q_len=draft_token_num,
    )
    _plan_dense(wrapper, backend, metadata, causal=True, lse=False)
    return metadata

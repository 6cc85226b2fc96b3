"""Fork multi-token plans on FlashInfer's MLA wrapper: verify, draft extend,
and the DCP prefill over the all-gathered prefix."""

from __future__ import annotations

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper


class _DraftExtendPlannerBase:
    """Owns one paged MLA wrapper for the draft-extend pass of the MLA draft."""

    def __init__(self, model_runner: ModelRunner, backend: FlashInferMLAAttnBackend):
        cfg = model_runner.model_config
        parallel = get_parallel()
        self.backend = backend
        self.translator = model_runner.kv_index_translator
        self.num_heads = cfg.num_attention_heads // parallel.attn_tp_size
        self.kv_lora_rank = cfg.kv_lora_rank
        self.qk_rope_head_dim = cfg.qk_rope_head_dim
        self.scaling = cfg.scaling
        self.dtype = model_runner.dtype
        max_bs = model_runner.req_to_token_pool.size
        self.qo_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=model_runner.device)
        self.kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=model_runner.device)
        self.wrapper = BatchMLAPagedAttentionWrapper(backend.workspace_buffer, backend="auto")

    def _pack(self, forward_batch: ForwardBatch, seq_lens: torch.Tensor, bs: int):
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            int(forward_batch.seq_lens_sum), dtype=torch.int32, device=seq_lens.device
        )
        self.translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    def _plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
        self.wrapper.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            self.scaling,
            self.dtype,
            self.dtype,
        )


class DraftExtendMLAPlanner(_DraftExtendPlannerBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (DRAFT_EXTEND_V2 fast plan)
    # expect: SG203
    def plan_draft_extend(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]  # post-write lengths
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens[:bs], dim=0)
        kv_indices = self._pack(forward_batch, seq_lens, bs)
        if not get_parallel().dcp_enabled:
            self._plan(qo_indptr, self.kv_indptr[: bs + 1], kv_indices, seq_lens.to(torch.int32))
            return
        kv_indices = self.translator.translate_dcp_read_ids(
            filter_dcp_local_kv_indices(kv_indices)
        )
        if forward_batch.seq_lens_cpu is not None:
            kv_len_arr = forward_batch.seq_lens_cpu[:bs].to(torch.int32, copy=True)
            update_local_kv_lens_for_dcp(kv_len_arr)
            kv_len_arr = kv_len_arr.to(seq_lens.device, non_blocking=True)
        else:
            # GPU-only batches carry no host mirror; skip the host-side shard
            # rather than sync on the device lengths.
            kv_len_arr = seq_lens.to(torch.int32)
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
        kv_indptr[1:] = torch.cumsum(kv_len_arr, dim=0)
        self._plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr)


class DraftExtendMLAPlannerGuarded(_DraftExtendPlannerBase):
    def __init__(self, model_runner: ModelRunner, backend: FlashInferMLAAttnBackend):
        if get_parallel().dcp_enabled:
            raise ValueError(
                "the flashinfer_mla draft-extend planner does not support decode "
                "context parallelism: a causal multi-token plan needs the global "
                "bound; use the cutedsl_mla draft backend"
            )
        super().__init__(model_runner, backend)

    # idiom: layers/attention/attention_registry.py create_trtllm_mla_backend (DCP refused up front) + flashinfer_mla draft-extend plan
    # expect: clean
    def plan_draft_extend(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        qo_indptr = self.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens[:bs], dim=0)
        kv_indices = self._pack(forward_batch, seq_lens, bs)
        self._plan(qo_indptr, self.kv_indptr[: bs + 1], kv_indices, seq_lens.to(torch.int32))


class DcpVerifyMLABackend(FlashInferMLAAttnBackend):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (target verify -> prefill_wrapper_verify)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_target_verify():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        spec_info = forward_batch.spec_info
        up = self.indices_updater_prefill
        # Under DCP every rank runs the whole verify query against its shard
        # and the model merges by LSE; only the page ids need sharding.
        self.verify_returns_lse = get_parallel().dcp_enabled
        kv_indices, kv_indptr, qo_indptr, _ = spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            paged_kernel_lens=forward_batch.seq_lens[:bs],
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.kv_index_translator,
            plan=forward_batch.kv_loc_plan,
        )
        if self.verify_returns_lse:
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        self.prefill_wrapper_verify.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            up.num_local_heads,
            up.kv_lora_rank,
            up.qk_rope_head_dim,
            1,
            True,
            up.scaling,
            up.q_data_type,
            up.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)


class GatheredPrefillMLABackend(FlashInferMLAAttnBackend):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (attn_dcp_metadata.dcp_kv_indptr)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        dcp_meta = forward_batch.attn_dcp_metadata
        if (
            not forward_batch.forward_mode.is_extend_without_speculative()
            or forward_batch.forward_mode.is_draft_extend_v2()
            or not get_parallel().dcp_enabled
            or dcp_meta is None
            or dcp_meta.dcp_kv_indptr is None
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        up = self.indices_updater_prefill
        qo_indptr = up.qo_indptr[: bs + 1]
        qo_indptr[1:] = torch.cumsum(
            forward_batch.seq_lens[:bs] - forward_batch.extend_prefix_lens[:bs], dim=0
        )
        # The prefix was all-gathered from the DCP group into dcp_kv_buffer
        # (forward_extend reads K from there), request by request: this plan
        # walks whole sequences of that gathered buffer, not the rank's shard.
        kv_indptr = dcp_meta.dcp_kv_indptr
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_meta.dcp_kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            up.num_local_heads,
            up.kv_lora_rank,
            up.qk_rope_head_dim,
            1,
            True,
            up.scaling,
            up.q_data_type,
            up.data_type,
        )
        self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

"""FlashInfer MLA (BatchMLAPagedAttentionWrapper.plan) backends for DCP.

The base class plans the decode wrapper itself (instead of going through
SGLang's indices updater) so the accelerator team can fuse the DCP shard
selection into one pass; subclasses swap the planning step.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAMultiStepDraftBackend,
    PrefillMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel

from blindsg29.accel import dcp_utils
from blindsg29.config import get_vendor_flags

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def _gather_kv_stream(backend, forward_batch, seq_lens: torch.Tensor, bs: int):
    """Virtual read stream for ``seq_lens`` tokens of each request."""
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
    kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
    kv_indices = torch.empty(
        int(seq_lens.sum().item()), dtype=torch.int32, device=seq_lens.device
    )
    backend.kv_index_translator.pack_read_stream(
        forward_batch.kv_loc_plan,
        req_pool_indices=forward_batch.req_pool_indices[:bs],
        seq_lens=seq_lens,
        indptr=kv_indptr,
        out=kv_indices,
    )
    return kv_indptr, kv_indices


class VendorFlashInferMLABackend(FlashInferMLAAttnBackend):
    def __init__(
        self,
        model_runner: "ModelRunner",
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        cfg = model_runner.model_config
        parallel = get_parallel()
        self.num_decode_heads = (
            cfg.num_attention_heads // parallel.attn_tp_size * parallel.attn_dcp_size
        )
        self.num_prefill_heads = cfg.num_attention_heads // parallel.attn_tp_size
        self.kv_lora_rank = cfg.kv_lora_rank
        self.qk_rope_head_dim = cfg.qk_rope_head_dim
        self.sm_scale = cfg.scaling
        self.q_dtype = model_runner.dtype
        self.kv_dtype = model_runner.kv_cache_dtype
        self.flags = get_vendor_flags()

    def _plan(self, wrapper, qo_indptr, kv_indptr, kv_indices, kv_lens, *, causal=False, heads=None):
        dcp_utils.plan_mla_wrapper(
            wrapper,
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            num_heads=heads or self.num_decode_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=causal,
            sm_scale=self.sm_scale,
            q_data_type=self.q_dtype,
            kv_data_type=self.kv_dtype,
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend.init_forward_metadata, dispatching decode to the vendor planner and everything else to the parent
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle():
            self._plan_decode(forward_batch)
            self.forward_metadata = DecodeMetadata(self.decode_wrapper)
            return
        if mode.is_target_verify() and hasattr(self, "_plan_verify"):
            self._plan_verify(forward_batch)
            self.forward_metadata = PrefillMetadata(self.prefill_wrapper_verify, False)
            return
        super().init_forward_metadata(forward_batch)

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward under DCP, localizing kv_len_arr with update_local_kv_lens_for_dcp before wrapper.plan
    # expect: clean
    def _plan_decode(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, seq_lens, bs)
        kv_lens = seq_lens.clone()
        if get_parallel().dcp_enabled:
            update_local_kv_lens_for_dcp(kv_lens)
            kv_indices = dcp_utils.local_kv_indices(kv_indices, self.kv_index_translator)
            kv_indptr = dcp_utils.indptr_from_lens(kv_lens)
        self._plan(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
        )

    def init_forward_metadata_out_graph(
        self, forward_batch: "ForwardBatch", in_capture: bool = False
    ):
        if in_capture or not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        self._replay_decode_plan(
            forward_batch.batch_size,
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            forward_batch.seq_lens_cpu,
            forward_batch.kv_loc_plan,
        )

    # idiom: flashinfer_mla_backend._apply_cuda_graph_metadata decode replay: host kv_len_arr_cpu localized, then handed to the indices updater's fast plan
    # expect: clean
    def _replay_decode_plan(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
        plan: Any,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        dcp_utils.localize_cpu_lens_(kv_len_arr_cpu)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=kv_len_arr_cpu,
            kv_indices=self.cuda_graph_kv_indices,
        )


class LocalIndicesPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend decode plan with the DCP shard applied to kv_indices / kv_indptr through dcp_utils helpers
    # expect: SG203
    def _plan_decode(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, seq_lens, bs)
        if get_parallel().dcp_enabled:
            kv_indices = dcp_utils.local_kv_indices(kv_indices, self.kv_index_translator)
            kv_indptr = dcp_utils.indptr_from_lens(dcp_utils.local_kv_lens(seq_lens))
        self._plan(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens,
        )


class IndptrDiffPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill plan_kv_len_arr = kv_indptr[1:] - kv_indptr[:-1], reused for the DCP decode plan
    # expect: SG203
    def _plan_decode(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, seq_lens, bs)
        if get_parallel().dcp_enabled:
            kv_indices = dcp_utils.local_kv_indices(kv_indices, self.kv_index_translator)
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        self._plan(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_len_arr,
        )


class DictArgsPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend fast_decode_kwargs dict, plan arguments assembled in a dict and patched for DCP before dcp_utils.plan_mla_wrapper(**args)
    # expect: SG203
    def _plan_decode(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, seq_lens, bs)
        plan_args: Dict[str, Any] = {
            "qo_indptr": self.q_indptr_decode[: bs + 1],
            "kv_indptr": kv_indptr,
            "kv_indices": kv_indices,
            "kv_lens": seq_lens,
        }
        if get_parallel().dcp_enabled:
            local = dcp_utils.local_kv_lens(seq_lens)
            plan_args.update(
                kv_indptr=dcp_utils.indptr_from_lens(local),
                kv_indices=dcp_utils.local_kv_indices(
                    kv_indices, self.kv_index_translator
                ),
            )
        dcp_utils.plan_mla_wrapper(
            self.decode_wrapper,
            **plan_args,
            num_heads=self.num_decode_heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            causal=False,
            sm_scale=self.sm_scale,
            q_data_type=self.q_dtype,
            kv_data_type=self.kv_dtype,
        )


class PlannerHelperBackend(VendorFlashInferMLABackend):
    # idiom: dcp/planner.plan_dcp_decode_metadata, which rewrites kv_lens / kv_indptr to the per-rank values in place before wrapper.plan
    # expect: clean
    def _plan_decode(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32).clone()
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, kv_lens, bs)
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            if n_ids > 0 and self.kv_index_translator.needs_read_translate:
                valid = kv_indices[:n_ids]
                valid.copy_(self.kv_index_translator.translate_dcp_read_ids(valid))
            kv_indices = kv_indices[:n_ids]
        self._plan(
            self.decode_wrapper,
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            kv_lens,
        )


class HostLensReplayPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend._apply_cuda_graph_metadata decode replay, host kv_len_arr_cpu built from seq_lens_cpu and handed to the fast plan
    # expect: SG203
    def _replay_decode_plan(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        seq_lens_cpu: torch.Tensor,
        plan: Any,
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        fast_kwargs = {
            "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
            "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
            "kv_len_arr_cpu": kv_len_arr_cpu,
            "kv_indices": self.cuda_graph_kv_indices,
        }
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **fast_kwargs,
        )


class VerifyPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend target-verify plan (prefill_wrapper_verify, qo_indptr step draft_token_num, kv = seq_lens + draft_token_num) with DCP-local indices
    # expect: SG203
    def _plan_verify(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        qo_indptr = torch.arange(
            0, (bs + 1) * ndt, ndt, dtype=torch.int32, device=kv_lens.device
        )
        kv_indptr, kv_indices = _gather_kv_stream(self, forward_batch, kv_lens, bs)
        if get_parallel().dcp_enabled:
            kv_indices = dcp_utils.local_kv_indices(kv_indices, self.kv_index_translator)
            kv_indptr = dcp_utils.indptr_from_lens(dcp_utils.local_kv_lens(kv_lens))
        self._plan(
            self.prefill_wrapper_verify,
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            causal=True,
        )


class GatheredExtendPlanner(VendorFlashInferMLABackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill DCP extend: plan over attn_dcp_metadata.dcp_kv_indptr / dcp_kv_indices, i.e. the all-gathered dcp_kv_buffer that forward_extend reads
    # expect: clean
    def _plan_extend(self, forward_batch: "ForwardBatch") -> bool:
        meta = forward_batch.attn_dcp_metadata
        if (
            meta is None
            or meta.dcp_kv_buffer is None
            or meta.dcp_kv_indptr is None
            or meta.dcp_kv_indices is None
        ):
            return False
        bs = forward_batch.batch_size
        qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=meta.dcp_kv_indptr.device)
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens[:bs], dim=0)
        kv_indptr = meta.dcp_kv_indptr
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        self._plan(
            self.prefill_wrapper_paged,
            qo_indptr,
            kv_indptr,
            meta.dcp_kv_indices,
            kv_len_arr,
            causal=True,
            heads=self.num_prefill_heads,
        )
        return True

    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        mode = forward_batch.forward_mode
        if (
            mode.is_extend()
            and not mode.is_target_verify()
            and any(forward_batch.extend_prefix_lens_cpu)
            and self._plan_extend(forward_batch)
        ):
            self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)
            return
        super().init_forward_metadata(forward_batch)


class VendorMLAMultiStepDraftBackend(FlashInferMLAMultiStepDraftBackend):
    """Plans every draft step's decode wrapper in one loop (topk == 1 chain)."""

    def _step_stream(self, backend, forward_batch, step_lens, bs):
        return _gather_kv_stream(backend, forward_batch, step_lens, bs)

    def _plan_step(self, backend, qo_indptr, kv_indptr, kv_indices, kv_lens):
        updater = backend.indices_updater_decode
        dcp_utils.plan_mla_wrapper(
            backend.decode_wrapper,
            qo_indptr,
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

    # idiom: flashinfer_mla_backend.FlashInferMLAMultiStepDraftBackend.init_forward_metadata, one decode plan per draft step with the step's lengths localized by dcp_utils.local_kv_lens
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        base = forward_batch.seq_lens[:bs].to(torch.int32)
        dcp = get_parallel().dcp_enabled
        for i, backend in enumerate(self.attn_backends):
            step_lens = base + (i + 1)
            kv_indptr, kv_indices = self._step_stream(backend, forward_batch, step_lens, bs)
            kv_lens = dcp_utils.local_kv_lens(step_lens)
            if dcp:
                kv_indices = dcp_utils.local_kv_indices(
                    kv_indices, self.kv_index_translator
                )
                kv_indptr = dcp_utils.indptr_from_lens(kv_lens)
            self._plan_step(
                backend,
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                kv_lens,
            )
            backend.forward_metadata = DecodeMetadata(backend.decode_wrapper)


class FusedStepsMLAMultiStepDraftBackend(VendorMLAMultiStepDraftBackend):
    # idiom: flashinfer_mla_backend.FlashInferMLAMultiStepDraftBackend.init_forward_metadata, step lengths precomputed in a comprehension and zipped with the step backends
    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        base = forward_batch.seq_lens[:bs].to(torch.int32)
        step_lens = [base + (i + 1) for i in range(len(self.attn_backends))]
        dcp = get_parallel().dcp_enabled
        for backend, lens in zip(self.attn_backends, step_lens):
            kv_indptr, kv_indices = self._step_stream(backend, forward_batch, lens, bs)
            if dcp:
                kv_indices = dcp_utils.local_kv_indices(
                    kv_indices, self.kv_index_translator
                )
                kv_indptr = dcp_utils.indptr_from_lens(dcp_utils.local_kv_lens(lens))
            self._plan_step(
                backend,
                self.q_indptr_decode[: bs + 1],
                kv_indptr,
                kv_indices,
                lens,
            )
            backend.forward_metadata = DecodeMetadata(backend.decode_wrapper)

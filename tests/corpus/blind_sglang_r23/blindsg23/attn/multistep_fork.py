"""Fork multi-step draft planner on FlashInfer's MLA wrapper (topk == 1).

One wrapper per draft step; step i attends to the committed prefix plus the
i + 1 draft slots written so far.
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import BatchMLAPagedAttentionWrapper


class _MultiStepMLAPlannerBase:
    def __init__(self, model_runner: ModelRunner, speculative_num_steps: int):
        cfg = model_runner.model_config
        parallel = get_parallel()
        self.num_steps = speculative_num_steps
        # DCP decode attends with the query heads gathered across the group.
        self.num_heads = (
            cfg.num_attention_heads // parallel.attn_tp_size * parallel.attn_dcp_size
        )
        self.kv_lora_rank = cfg.kv_lora_rank
        self.qk_rope_head_dim = cfg.qk_rope_head_dim
        self.scaling = cfg.scaling
        self.dtype = model_runner.dtype
        self.translator = model_runner.kv_index_translator
        max_bs = model_runner.req_to_token_pool.size
        device = model_runner.device
        self.q_indptr = torch.arange(0, max_bs + 1, dtype=torch.int32, device=device)
        self.kv_indptr = torch.zeros(
            (speculative_num_steps, max_bs + 1), dtype=torch.int32, device=device
        )
        workspace = torch.empty(
            envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.get(), dtype=torch.uint8, device=device
        )
        self.wrappers: List[BatchMLAPagedAttentionWrapper] = [
            BatchMLAPagedAttentionWrapper(workspace, backend="auto")
            for _ in range(speculative_num_steps - 1)
        ]

    def _pack_step(self, i: int, forward_batch: ForwardBatch, step_lens: torch.Tensor, bs: int):
        kv_indptr = self.kv_indptr[i, : bs + 1]
        kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
        total = int(forward_batch.seq_lens_sum) + (i + 1) * bs
        kv_indices = torch.empty(total, dtype=torch.int32, device=step_lens.device)
        self.translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=step_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indptr, kv_indices

    def _plan_step(self, i, q_indptr, kv_indptr, kv_indices, kv_lens):
        self.wrappers[i].plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.dtype,
            self.dtype,
        )


class DcpMultiStepMLADraftBackend(_MultiStepMLAPlannerBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata / common_template
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        q_indptr = self.q_indptr[: bs + 1]
        dcp_enabled = get_parallel().dcp_enabled
        for i in range(self.num_steps - 1):
            step_lens = forward_batch.seq_lens[:bs] + (i + 1)
            kv_indptr, kv_indices = self._pack_step(i, forward_batch, step_lens, bs)
            if dcp_enabled:
                kv_indices = self.translator.translate_dcp_read_ids(
                    filter_dcp_local_kv_indices(kv_indices)
                )
            self._plan_step(i, q_indptr, kv_indptr, kv_indices, step_lens.to(torch.int32))


class DcpMultiStepMLADraftBackendLocal(_MultiStepMLAPlannerBase):
    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend + dcp/planner.py plan_dcp_decode_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        q_indptr = self.q_indptr[: bs + 1]
        dcp_enabled = get_parallel().dcp_enabled
        for i in range(self.num_steps - 1):
            step_lens = forward_batch.seq_lens[:bs] + (i + 1)
            kv_indptr, kv_indices = self._pack_step(i, forward_batch, step_lens, bs)
            kv_lens = step_lens.to(torch.int32)
            if dcp_enabled:
                # kv_lens / kv_indptr become this rank's share, in place.
                n_local = plan_dcp_decode_metadata(
                    kv_lens, kv_indptr, kv_indices, False, {}, bs
                )
                if n_local > 0:
                    kv_indices[:n_local] = self.translator.translate_dcp_read_ids(
                        kv_indices[:n_local]
                    )
            self._plan_step(i, q_indptr, kv_indptr, kv_indices, kv_lens)

"""Multi-layer MTP drafter: one de-tied runner (and attention backend) per
MTP layer, chained step by step."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.utils.common import fast_topk, require_mlp_sync

from blindsg32.common.settings import MTPDraftSettings
from blindsg32.mtp.contexts import draft_backend_scope
from blindsg32.mtp.plan_utils import logits_of, refresh_seq_lens_sum

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

logger = logging.getLogger(__name__)


class MultiLayerMTPDrafter:
    def __init__(self, settings: MTPDraftSettings, draft_runner_list: List[Any], num_front_tokens: int = 0):
        self.settings = settings
        self.topk = settings.topk
        self.num_steps = settings.num_steps
        self.num_draft_tokens = settings.num_draft_tokens
        self.draft_runner_list = draft_runner_list
        self.num_front_tokens = num_front_tokens

    @classmethod
    def from_runners(cls, runners: List[Any]) -> "MultiLayerMTPDrafter":
        return cls(MTPDraftSettings.from_spec_context(), runners)

    @property
    def preplan_ok(self) -> bool:
        """Pre-planning is only safe when the runner will not pad the batch."""
        return not require_mlp_sync()

    def _bind_pools(self, forward_batch: ForwardBatch, step: int) -> None:
        runner = self.draft_runner_list[step]
        forward_batch.req_to_token_pool = runner.req_to_token_pool
        forward_batch.token_to_kv_pool = runner.token_to_kv_pool

    @staticmethod
    def _rotate(input_ids: torch.Tensor, start_loc: torch.Tensor, lens: torch.Tensor, new_ids: torch.Tensor) -> None:
        ends = start_loc + lens - 1
        input_ids[:-1] = input_ids[1:].clone()
        input_ids[ends.long()] = new_ids.flatten()

    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_decode (eager branch); prepare_for_draft_extend marks the batch, per-step init_forward_metadata, then each runner forwards
    # expect: SG106
    def draft_extend_for_decode(
        self, batch: "ScheduleBatch", batch_result: "GenerationBatchResult"
    ) -> List[torch.Tensor]:
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_tokens_per_req=self.num_steps + 1,
            num_tokens_for_logprob_per_req=1,
        )
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            batch_result.next_token_ids,
            self.num_draft_tokens,
            self.draft_runner_list[0],
            None,
            return_hidden_states_before_norm=True,
        )
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.num_steps):
            self._bind_pools(forward_batch, step)
            runner = self.draft_runner_list[step]
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            out = logits_of(runner.forward(forward_batch))
            _, topk_index = fast_topk(
                torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1
            )
            topk_index_list.append(topk_index)
            if step < self.num_steps - 1 and forward_batch.extend_seq_lens is not None:
                self._rotate(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                )
        return topk_index_list

    # idiom: speculative/multi_layer_eagle_worker_v2.py _draft_extend_for_prefill (replace(forward_batch) per step); plans+marks once, then each step forwards a dataclasses.replace copy carrying the mark
    # expect: SG106
    def _per_step_replace_forward(self, forward_batch: ForwardBatch) -> List[Any]:
        outputs: List[Any] = []
        if not forward_batch.forward_mode.is_idle():
            refresh_seq_lens_sum(forward_batch)
            self.draft_runner_list[0].attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        for step in range(self.num_steps):
            self._bind_pools(forward_batch, step)
            # DP padding mutates the batch in place; keep it per step.
            step_forward_batch = replace(forward_batch)
            outputs.append(logits_of(self.draft_runner_list[step].forward(step_forward_batch)))
        return outputs

    # idiom: speculative/multi_layer_eagle_worker_v2.py MultiLayerEagleDraftWorker._draft_extend_for_prefill; per-step forward on a replace() copy with no pre-plan, each runner plans after its padding
    # expect: clean
    def draft_extend_for_prefill(self, forward_batch: ForwardBatch, next_token_ids: torch.Tensor) -> List[torch.Tensor]:
        topk_index_list: List[torch.Tensor] = []
        for step in range(self.num_steps):
            self._bind_pools(forward_batch, step)
            step_forward_batch = replace(forward_batch)
            out = logits_of(self.draft_runner_list[step].forward(step_forward_batch))
            _, topk_index = fast_topk(
                torch.softmax(out.next_token_logits, dim=-1), self.topk, dim=-1
            )
            topk_index_list.append(topk_index)
            if forward_batch.extend_seq_lens is not None:
                self._rotate(
                    forward_batch.input_ids,
                    forward_batch.extend_start_loc,
                    forward_batch.extend_seq_lens,
                    topk_index,
                )
        return topk_index_list

    # idiom: speculative/multi_layer_eagle_worker_v2.py chain step; a local closure plans on the step runner's backend and marks, then the step runner forwards
    # expect: SG106
    def _chain_step_closure(self, forward_batch: ForwardBatch, step: int) -> Any:
        runner = self.draft_runner_list[step]

        def _prepare(fb: ForwardBatch) -> ForwardBatch:
            refresh_seq_lens_sum(fb)
            runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
            return fb

        self._bind_pools(forward_batch, step)
        planned = _prepare(forward_batch)
        with draft_backend_scope(runner.attn_backend, planned):
            return logits_of(runner.forward(planned))

    # idiom: speculative/multi_layer_eagle_worker_v2.py chain step; the closure only plans (no mark), so the step runner plans again after padding
    # expect: clean
    def _chain_step_plan_only(self, forward_batch: ForwardBatch, step: int) -> Any:
        runner = self.draft_runner_list[step]

        def _prepare(fb: ForwardBatch) -> ForwardBatch:
            refresh_seq_lens_sum(fb)
            runner.attn_backend.init_forward_metadata(fb)
            return fb

        self._bind_pools(forward_batch, step)
        planned = _prepare(forward_batch)
        with draft_backend_scope(runner.attn_backend, planned):
            return logits_of(runner.forward(planned))

    # idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready(replan_equivalent=...); boundary-KV front rows planned, marked replan_equivalent=not attn_dp_enabled, then forwarded
    # expect: SG106
    def _boundary_fill_forward(self, forward_batch: ForwardBatch) -> Any:
        runner = self.draft_runner_list[0]
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        refresh_seq_lens_sum(forward_batch)
        runner.attn_backend.init_forward_metadata(forward_batch)
        # Re-planning rebuilds the widened window from scratch, which is only
        # worth it on a single replica.
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=not get_parallel().attn_dp_enabled
        )
        return logits_of(runner.forward(forward_batch))

    # idiom: speculative/multi_layer_eagle_worker_v2.py boundary-KV front rows; pre-plans and marks only when the preplan_ok property says no MLP sync, else leaves the plan to the runner
    # expect: clean
    def _front_rows_forward(self, forward_batch: ForwardBatch) -> Any:
        runner = self.draft_runner_list[0]
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        if self.preplan_ok:
            refresh_seq_lens_sum(forward_batch)
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return logits_of(runner.forward(forward_batch))

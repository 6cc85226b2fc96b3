"""Multi-layer EAGLE (one draft runner per MTP layer) and standalone-draft
forks: per-step draft-extend planning over ``draft_runner_list``."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

from blindsg41.common.plan_utils import new_draft_extend_batch, pad_then_plan


@dataclasses.dataclass(frozen=True)
class StepPlanConfig:
    replan_equivalent: bool = True


PINNED_STEP = StepPlanConfig(replan_equivalent=False)
REPLANNABLE_STEP = StepPlanConfig()


def _bind_pools(fb: ForwardBatch, runner: ModelRunner) -> ForwardBatch:
    fb.req_to_token_pool = runner.req_to_token_pool
    fb.token_to_kv_pool = runner.token_to_kv_pool
    return fb


class ForkMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    def _extend_batch(self, batch: ScheduleBatch, predict: torch.Tensor) -> ForwardBatch:
        return new_draft_extend_batch(
            batch, self.draft_runner, predict, self.speculative_num_draft_tokens
        )

    # expect: clean
    def draft_extend_steps(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            _bind_pools(forward_batch, runner)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    # expect: SG106
    def draft_extend_steps_preplanned(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            _bind_pools(forward_batch, runner)
            if forward_batch.forward_mode.is_idle():
                outputs.append(runner.forward(forward_batch).logits_output)
                continue
            runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    def _plan_table(
        self, batches: List[ForwardBatch], cfg: StepPlanConfig
    ) -> Dict[int, Tuple[ModelRunner, ForwardBatch]]:
        table: Dict[int, Tuple[ModelRunner, ForwardBatch]] = {}
        for step, fb in enumerate(batches):
            runner = self.draft_runner_list[step]
            runner.attn_backend.init_forward_metadata(_bind_pools(fb, runner))
            fb.mark_forward_metadata_ready(replan_equivalent=cfg.replan_equivalent)
            table[step] = (runner, fb)
        return table

    # expect: SG106
    def run_step_table(self, batch: ScheduleBatch, predicts: List[torch.Tensor]):
        batches = [self._extend_batch(batch, p) for p in predicts]
        table = self._plan_table(batches, PINNED_STEP)
        return {
            step: runner.forward(fb).logits_output
            for step, (runner, fb) in sorted(table.items())
        }

    # expect: clean
    def run_default_table(self, batch: ScheduleBatch, predicts: List[torch.Tensor]):
        batches = [self._extend_batch(batch, p) for p in predicts]
        table = self._plan_table(batches, REPLANNABLE_STEP)
        return {
            step: runner.forward(fb).logits_output
            for step, (runner, fb) in sorted(table.items())
        }


class ForkStandaloneDraftWorker(StandaloneDraftWorker):
    step_cfg: StepPlanConfig = REPLANNABLE_STEP

    @property
    def extend_backend(self) -> Any:
        return self.draft_runner.attn_backend

    def _extend_batch(self, batch: ScheduleBatch, predict: torch.Tensor) -> ForwardBatch:
        return new_draft_extend_batch(
            batch, self.draft_runner, predict, self.speculative_num_draft_tokens
        )

    # expect: SG106
    def standalone_draft_extend(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def standalone_draft_extend_cfg(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.step_cfg.replan_equivalent
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def standalone_draft_extend_override(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        cfg = dataclasses.replace(self.step_cfg, replan_equivalent=False)
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=cfg.replan_equivalent
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def standalone_draft_extend_synced(self, batch: ScheduleBatch, predict: torch.Tensor):
        forward_batch = self._extend_batch(batch, predict)
        forward_batch, _ = pad_then_plan(
            self.draft_runner, self.extend_backend, forward_batch
        )
        return self.draft_runner.forward(forward_batch).logits_output

"""Multi-step draft drivers that keep per-iteration state on the driver.

The draft model runner's own backend plans the step; the steps then run
through ``ModelRunner.forward`` (which pads for DP attention and consults the
batch's planning mark).
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import fast_topk

from blindsg23.common.config import SpecForkConfig
from blindsg23.common.plan_helpers import dp_sync_active, plan_and_mark, preplanned_phase


class StepwiseDraftDriver:
    def __init__(self, draft_runner: ModelRunner, cfg: Optional[SpecForkConfig] = None):
        # Step-by-step drivers run the draft eagerly (no captured decode graph).
        assert draft_runner.decode_cuda_graph_runner is None
        self.draft_runner = draft_runner
        self.cfg = cfg or SpecForkConfig.from_runtime()
        self._batch: Optional[ForwardBatch] = None
        self._planned = False

    def prepare(self, forward_batch: ForwardBatch) -> None:
        """Stage the iteration's batch and plan it once for all steps."""
        self._batch = forward_batch
        self._planned = plan_and_mark(self.draft_runner.attn_backend, forward_batch)

    def _one_step(self, input_ids: torch.Tensor) -> torch.Tensor:
        forward_batch = self._batch
        forward_batch.input_ids = input_ids
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        forward_batch.spec_info.hidden_states = logits_output.hidden_states
        forward_batch.positions.add_(1)
        _, next_ids = fast_topk(logits_output.next_token_logits, 1, dim=-1)
        return next_ids

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft -> draft_forward (state staged on the driver, steps via ModelRunner.forward)
    # expect: SG106
    def drive(self, forward_batch: ForwardBatch, first_ids: torch.Tensor) -> List[torch.Tensor]:
        self.prepare(forward_batch)
        ids = [first_ids]
        for _ in range(self.cfg.num_steps - 1):
            ids.append(self._one_step(ids[-1].flatten()))
        return ids

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + forward_batch_info.py forward_metadata_ready reset when DP-synced
    # expect: clean
    def drive_invalidate(self, forward_batch: ForwardBatch, first_ids: torch.Tensor) -> List[torch.Tensor]:
        self.prepare(forward_batch)
        if self._planned and dp_sync_active(forward_batch):
            # The steps' forwards pad this batch to the DP-wide shape; the
            # staged plan is pre-pad, so hand planning back to the forward.
            forward_batch.forward_metadata_ready = False
        ids = [first_ids]
        for _ in range(self.cfg.num_steps - 1):
            ids.append(self._one_step(ids[-1].flatten()))
        return ids


class PhaseScopedDraftDriver:
    def __init__(self, draft_runner: ModelRunner, num_steps: int):
        assert draft_runner.decode_cuda_graph_runner is None
        self.draft_runner = draft_runner
        self.num_steps = num_steps

    def _steps(self, forward_batch: ForwardBatch, first_ids: torch.Tensor) -> List[torch.Tensor]:
        ids = [first_ids]
        for _ in range(self.num_steps - 1):
            forward_batch.input_ids = ids[-1].flatten()
            out = self.draft_runner.forward(forward_batch).logits_output
            forward_batch.positions.add_(1)
            ids.append(torch.argmax(out.next_token_logits, dim=-1, keepdim=True))
        return ids

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (plan + mark as a scoped phase via a context manager)
    # expect: SG106
    def run(self, forward_batch: ForwardBatch, first_ids: torch.Tensor):
        with preplanned_phase(self.draft_runner.attn_backend, forward_batch) as fb:
            return self._steps(fb, first_ids)

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (scoped phase, replan_equivalent mark)
    # expect: clean
    def run_replannable(self, forward_batch: ForwardBatch, first_ids: torch.Tensor):
        with preplanned_phase(
            self.draft_runner.attn_backend, forward_batch, replan_equivalent=True
        ) as fb:
            return self._steps(fb, first_ids)

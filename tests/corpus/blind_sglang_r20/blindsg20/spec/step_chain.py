"""Step runners for the fork's standalone-draft (small LM) speculative mode.

A step runner wraps one ModelRunner and runs one draft-extend forward; the
preparation hook decides how the batch gets its attention metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.nvtx_utils import profile_range

from blindsg20.common.planning import pad_for_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class _StepRunnerBase:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    def _prepare(self, forward_batch: ForwardBatch) -> None:
        """Plan outside the forward so the plan can overlap the previous step."""
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def run_step(self, forward_batch: ForwardBatch):
        return self.model_runner.forward(forward_batch).logits_output


class _TimedStepRunner(_StepRunnerBase):
    def run_step(self, forward_batch: ForwardBatch):
        with profile_range("fork_spec_step"):
            return super().run_step(forward_batch)


class DraftExtendStepRunner(_TimedStepRunner):
    # expect: SG106
    def run_step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._prepare(forward_batch)
        return super().run_step(forward_batch)


class _PadFirstPrepareMixin:
    def _prepare(self, forward_batch: ForwardBatch) -> None:
        """Apply the DP padding first so the plan matches what the forward runs."""
        pad_for_mlp_sync(forward_batch, self.model_runner)
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class PaddedDraftExtendStepRunner(_PadFirstPrepareMixin, _TimedStepRunner):
    # expect: clean
    def run_step(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._prepare(forward_batch)
        return super().run_step(forward_batch)

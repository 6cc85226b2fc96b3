"""EAGLE draft worker with pluggable pre-forward hooks for the draft extend.

Hooks let the plugins (grammar-aware drafting, KV-canary) run between batch
construction and the draft runner's forward.
"""

from __future__ import annotations

from typing import Callable, List

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg11.runtime.plan_helpers import pad_for_mlp_sync

PreForwardHook = Callable[[ForwardBatch], None]


class HookedDraftWorker(EagleDraftWorker):
    def install_extend_hooks(self) -> None:
        self._pre_forward_hooks: List[PreForwardHook] = [
            self._plan_extend,
            self._mark_planned,
        ]
        # Plan-only chain: the runner still decides whether to re-plan.
        self._plan_only_hooks: List[PreForwardHook] = [self._plan_extend]

    def add_pre_forward_hook(self, hook: PreForwardHook) -> None:
        self._pre_forward_hooks.append(hook)

    def _plan_extend(self, forward_batch: ForwardBatch) -> None:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    @staticmethod
    def _mark_planned(forward_batch: ForwardBatch) -> None:
        forward_batch.mark_forward_metadata_ready()

    # expect: SG106
    def run_with_hooks(self, forward_batch: ForwardBatch):
        for hook in self._pre_forward_hooks:
            hook(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_with_plan_only_hooks(self, forward_batch: ForwardBatch):
        for hook in self._plan_only_hooks:
            hook(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    def _make_extend_runner(self, attn_backend) -> Callable[[ForwardBatch], object]:
        runner = self.draft_runner

        def run(forward_batch: ForwardBatch):
            if not forward_batch.forward_mode.is_idle():
                attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return runner.forward(forward_batch).logits_output

        return run

    def _make_padded_extend_runner(self, attn_backend) -> Callable[[ForwardBatch], object]:
        runner = self.draft_runner

        def run(forward_batch: ForwardBatch):
            padded = pad_for_mlp_sync(runner, forward_batch)
            if not forward_batch.forward_mode.is_idle():
                attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            out = runner.eager_runner.execute(forward_batch)
            if padded:
                forward_batch.post_forward_mlp_sync_batch(out)
            return out

        return run

    # expect: SG106
    def run_with_closure(self, forward_batch: ForwardBatch):
        run = self._make_extend_runner(self.draft_runner.attn_backend)
        return run(forward_batch)

    # expect: clean
    def run_with_padded_closure(self, forward_batch: ForwardBatch):
        run = self._make_padded_extend_runner(self.draft_runner.attn_backend)
        return run(forward_batch)

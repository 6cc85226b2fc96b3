"""Fork of SGLang's EAGLE v2 draft worker.

The fork keeps SGLang's draft / draft-extend structure but plans attention
metadata itself on the eager (non-graph) paths so the plan can overlap the
previous step on the plan stream.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg22.managers.dp_padding import pad_for_dp_attention


class ForkEagleDraftWorker(EagleDraftWorker):
    """EAGLE draft worker with eager-path pre-planning."""

    draft_runner: ModelRunner

    # Pre-plans are recorded on the batch so ModelRunner.forward skips its own.
    PREPLAN_MARKS_READY = True
    # The draft-extend pre-plan uses draft_runner.attn_backend, the very
    # backend ModelRunner.forward would plan with: a re-plan is equivalent.
    PREPLAN_REPLAN_EQUIVALENT = True

    # ------------------------------------------------------------------
    # Draft extend (after verify), eager path.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager branch after eagle_worker_common.prepare_for_draft_extend)
    # expect: SG106
    def draft_extend_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if not forward_batch.forward_mode.is_idle():
            # Plan on the live batch so the forward can skip its own plan.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (eager branch), marked replan-equivalent
    # expect: clean
    def draft_extend_eager_replan(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ) -> LogitsProcessorOutput:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Same backend as the forward path: if DP padding reshapes the
            # batch, ModelRunner re-plans it on the padded shapes.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[select_index]
        if logits_output.hidden_states is not None:
            logits_output.hidden_states = logits_output.hidden_states[select_index]
        return logits_output

    # ------------------------------------------------------------------
    # Multi-step draft decode, eager path.
    # ------------------------------------------------------------------

    def _run_draft_steps(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        """Per-step draft forwards; each step reads its own step backend."""
        hidden_states = forward_batch.spec_info.hidden_states
        step_logits: List[torch.Tensor] = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            step_logits.append(logits_output.next_token_logits)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        return step_logits

    def _run_draft_steps_eager(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        """Per-step draft forwards on an already padded batch (no re-padding)."""
        eager_runner = self.draft_runner.eager_runner
        step_logits: List[torch.Tensor] = []
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = eager_runner.execute(forward_batch)
            step_logits.append(logits_output.next_token_logits)
            forward_batch.spec_info.hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        return step_logits

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker.draft (non-graph branch: draft_attn_backend.init_forward_metadata + mark, then draft_forward)
    # expect: SG106
    def draft_multi_step(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        if self.speculative_num_steps <= 1:
            return []
        if forward_batch.forward_mode.is_idle():
            # Idle DP rank: enter every step's forward for the collectives.
            return self._run_draft_steps(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self._run_draft_steps(forward_batch)

    # idiom: sglang/srt/model_executor/model_runner.py ModelRunner._forward_raw (pad via prepare_mlp_sync_batch, then plan) applied to EagleDraftWorker.draft
    # expect: clean
    def draft_multi_step_padded(self, forward_batch: ForwardBatch) -> List[torch.Tensor]:
        if self.speculative_num_steps <= 1:
            return []
        if forward_batch.forward_mode.is_idle():
            # Idle DP rank: enter every step's forward for the collectives.
            return self._run_draft_steps(forward_batch)
        # Pad for DP attention first, so the multi-step plan sees the final
        # request count; the steps then go straight to the eager runner.
        pad_for_dp_attention(forward_batch, self.draft_runner)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self._run_draft_steps_eager(forward_batch)

    # ------------------------------------------------------------------
    # Policy carried on the class.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (mark gated by a class-level policy)
    # expect: SG106
    def draft_extend_with_class_policy(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if self.PREPLAN_MARKS_READY:
                forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_common.py prepare_for_draft_extend (replan_equivalent taken from a class attribute)
    # expect: clean
    def draft_extend_with_class_replan(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.PREPLAN_REPLAN_EQUIVALENT
            )
        return self.draft_runner.forward(forward_batch).logits_output

    # ------------------------------------------------------------------
    # Backend reached through properties.
    # ------------------------------------------------------------------

    @property
    def extend_backend(self) -> AttentionBackend:
        return self.draft_runner.attn_backend

    @property
    def needs_preplan(self) -> bool:
        # Without an MLP sync the forward never pads, so a pre-plan stays valid.
        return not require_mlp_sync()

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (backend reached via a property)
    # expect: SG106
    def draft_extend_prefill_preplanned(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        forward_batch.return_logprob = False
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_prefill (pre-plan gated by a property on require_mlp_sync)
    # expect: clean
    def draft_extend_prefill_gated(
        self, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        forward_batch.return_logprob = False
        if self.needs_preplan:
            self.extend_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # ------------------------------------------------------------------
    # Early returns.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/speculative/eagle_worker_v2.py EagleDraftWorker._draft_forward_idle / _draft_extend_for_decode (idle early return)
    # expect: SG106
    def draft_extend_or_idle(
        self, forward_batch: ForwardBatch
    ) -> Optional[LogitsProcessorOutput]:
        if forward_batch.forward_mode.is_idle():
            # Idle ranks still enter the forward for the DP collectives.
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: sglang/srt/speculative/dflash_worker_v2.py (defer_metadata_init when the forward will pad) with an early return
    # expect: clean
    def draft_extend_unless_synced(
        self, forward_batch: ForwardBatch
    ) -> Optional[LogitsProcessorOutput]:
        if forward_batch.forward_mode.is_idle() or require_mlp_sync():
            # The forward pads this batch: leave planning to ModelRunner.
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # ------------------------------------------------------------------
    # Result plumbing (unjudged helper).
    # ------------------------------------------------------------------

    def _commit_draft_extend(
        self,
        batch_result: GenerationBatchResult,
        logits_output: LogitsProcessorOutput,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        topk_p, topk_index = torch.topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states
        return topk_p, topk_index

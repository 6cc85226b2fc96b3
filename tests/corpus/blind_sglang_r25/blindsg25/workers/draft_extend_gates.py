"""Draft-extend variants whose pre-plan is gated on deployment flags.

Each method is one of the gates tried on the fork while chasing the
DP-attention draft-extend regressions; they share the batch builder and the
top-k epilogue of :class:`DraftExtendWorker`.
"""

from __future__ import annotations

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import is_npu, require_gathered_buffer, require_mlp_sync

from blindsg25.common.dp import dp_attention_enabled, mlp_sync_required
from blindsg25.workers.draft_extend import DraftExtendWorker

_is_npu = is_npu()


class GatedDraftExtendWorker(DraftExtendWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # Read once; the parallel layout is fixed for the worker's lifetime.
        # True whenever ModelRunner will run prepare_mlp_sync_batch.
        self._mlp_sync = require_mlp_sync()

    @property
    def draft_extend_replan_equivalent(self) -> bool:
        # Without DP attention nothing reshapes the batch, so a re-plan is
        # only "free" there.
        return not dp_attention_enabled()

    @property
    def replan_on_padding(self) -> bool:
        # Opt into the post-pad re-plan whenever the runner can pad.
        return mlp_sync_required()

    def _draft_extend_with_property(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (replan_equivalent from a property) -- path: DP attention (property False)
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.draft_extend_replan_equivalent
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_property_fixed(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (replan_equivalent when MLP sync pads)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.replan_on_padding
            )
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_no_dp(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/dflash_worker_v2.py verify (mark only without DP attention)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle() and not (
            get_parallel().attn_dp_enabled or require_gathered_buffer()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_dp_lockstep(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan only with DP attention) -- path: server_args.enable_dp_attention
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if self.server_args.enable_dp_attention and not forward_batch.forward_mode.is_idle():
            # Pre-plan on the plan stream so DP ranks reach the first
            # collective together instead of planning inside forward_extend.
            with self.plan_stream_ctx:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_unpadded_only(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: model_executor/model_runner.py _prepare_eager_forward_batch (pads iff global_num_tokens_cpu)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if (
            not forward_batch.forward_mode.is_idle()
            and forward_batch.global_num_tokens_cpu is None
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_lm_head_gate(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (gated on enable_dp_lm_head) -- path: DP attention with enable_dp_lm_head off
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        # With a DP lm_head the logits are gathered differently and the
        # runner must plan; otherwise the pre-plan is reused.
        if not get_parallel().enable_dp_lm_head and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_attn_tp_gate(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (gated on attn_tp_size == 1) -- path: DP attention with attn_tp_size == 1
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        # attn-TP scatter pads tokens to attn_tp_size; only pre-plan when it
        # cannot (attn_tp_size == 1).
        if get_parallel().attn_tp_size == 1 and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_npu_gate(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: dllm/algorithm/base.py _run_sync (replan_equivalent=_is_npu inverted) -- path: CUDA (_is_npu False) with DP attention
        # expect: SG106
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # NPU block tables break on re-plan-equivalence; CUDA keeps the plan.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=_is_npu)
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_state_flag(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (pre-plan only without MLP sync, flag on self)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if not self._mlp_sync and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

    def _draft_extend_early_return(self, batch: ScheduleBatch, batch_result: GenerationBatchResult):
        # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (defer under MLP sync, early return)
        # expect: clean
        forward_batch, select_index = self._draft_extend_batch(batch, batch_result)
        if require_mlp_sync() or forward_batch.forward_mode.is_idle():
            # ModelRunner pads and then plans the final batch itself.
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            return self._finish_draft_extend(batch_result, logits_output, select_index)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        self._finish_draft_extend(batch_result, logits_output, select_index)

"""Worker / runner subclasses that pre-plan attention metadata."""

from __future__ import annotations

from typing import Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
from sglang.srt.model_executor.forward_batch_info import PPProxyTensors
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker


class _ReplanPolicyMixin:
    """Stores the replan policy chosen at construction time."""

    def _init_replan_policy(self, allow_replan: bool) -> None:
        self._allow_post_pad_replan = allow_replan


class StrictEagleDraftWorker(_ReplanPolicyMixin, EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # DSA indexer cannot rebuild its schedule on a padded batch, so keep
        # the pre-pad plan as-is.
        self._init_replan_policy(False)
        self._planner = self.draft_runner.attn_backend

    # expect: SG106
    def draft_extend_step(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self._planner.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self._allow_post_pad_replan
        )
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output


class RelaxedEagleDraftWorker(_ReplanPolicyMixin, EagleDraftWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Plain FlashInfer backend: a forward re-plan equals our pre-plan.
        self._init_replan_policy(True)
        self._planner = self.draft_runner.attn_backend

    # expect: clean
    def draft_extend_step(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        self._planner.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self._allow_post_pad_replan
        )
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_runner.forward(forward_batch).logits_output


class PropertyPlannedDraftWorker(EagleDraftWorker):
    @property
    def extend_backend(self):
        return self.draft_runner.attn_backend

    # expect: SG106
    def run_draft_extend(self, forward_batch: ForwardBatch, gathered):
        forward_batch.global_num_tokens_cpu = gathered
        forward_batch.global_num_tokens_for_logprob_cpu = gathered
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # ModelRunner.forward pads the gathered batch before running it
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_draft_extend_after_pad(self, forward_batch: ForwardBatch, gathered):
        forward_batch.global_num_tokens_cpu = gathered
        forward_batch.global_num_tokens_for_logprob_cpu = gathered
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        self.extend_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class DPFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        # inherited: plans under the frozen-kv view and marks the batch ready
        self._init_frozen_kv_metadata(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # expect: clean
    def seed_forward_dp_aware(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is None:
            self._init_frozen_kv_metadata(forward_batch)
        # DP-synchronised batches stay unmarked: the forward pads, then plans
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output


class DPMultiLayerDraftWorker(MultiLayerEagleDraftWorker):
    # expect: SG106
    def run_mtp_layers(self, forward_batch: ForwardBatch):
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(runner)
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs

    # expect: clean
    def run_mtp_layers_unmarked(self, forward_batch: ForwardBatch):
        outputs = []
        for step in range(self.speculative_num_steps):
            runner = self.draft_runner_list[step]
            forward_batch.req_to_token_pool = runner.req_to_token_pool
            forward_batch.token_to_kv_pool = runner.token_to_kv_pool
            if not forward_batch.forward_mode.is_idle():
                # pre-pad plan, left unmarked: each runner's forward re-plans
                runner.attn_backend.init_forward_metadata(forward_batch)
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(runner)
            outputs.append(runner.forward(forward_batch).logits_output)
        return outputs


class PrePlanningModelRunner(ModelRunner):
    """ModelRunner that plans draft-extend metadata before the base forward."""

    # expect: SG106
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            forward_batch.forward_mode == ForwardMode.DRAFT_EXTEND_V2
            and forward_batch.global_num_tokens_cpu is not None
        ):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )


class LocalPrePlanningModelRunner(ModelRunner):
    # expect: clean
    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: Optional[bool] = None,
        pp_proxy_tensors: Optional[PPProxyTensors] = None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ) -> ModelRunnerOutput:
        if (
            forward_batch.forward_mode == ForwardMode.DRAFT_EXTEND_V2
            and forward_batch.global_num_tokens_cpu is None
        ):
            # only a rank-local batch: no DP padding will reshape it
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch,
            pp_proxy_tensors=pp_proxy_tensors,
            reinit_attn_backend=reinit_attn_backend,
            split_forward_count=split_forward_count,
        )

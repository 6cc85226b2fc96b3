"""EAGLE / frozen-KV MTP draft workers with vendor planning policies.

Each method replaces one step of SGLang's draft worker; the policy that
decides whether a pre-plan may be trusted across DP-attention padding is
read from ``VendorServingFlags``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

from blindsg29.reliability import plan_utils
from blindsg29.reliability.planning_mixin import PrePlanMixin

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

logger = logging.getLogger(__name__)


class VendorEagleDraftWorker(PrePlanMixin, EagleDraftWorker):
    @property
    def model_runner(self):
        return self.draft_runner

    def _eager_draft_extend(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.forward_mode.is_idle():
            return False
        graph = self.cuda_graph_runner_for_draft_extend
        return not (graph is not None and graph.can_run_graph(forward_batch))

    # idiom: eagle_worker_common.prepare_for_draft_extend mark, with replan_equivalent derived from the DP-attention flag (inverted)
    # expect: SG106
    def _draft_extend_dp_inverted(self, forward_batch: ForwardBatch):
        if self._eager_draft_extend(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            # Under DP attention every rank plans independently; only the
            # single-rank layout can re-plan cheaply inside the runner.
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=not self.flags.dp_attention_on
            )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_common.prepare_for_draft_extend mark, replan_equivalent set exactly when DP attention pads the batch
    # expect: clean
    def _draft_extend_dp_keyed(self, forward_batch: ForwardBatch):
        if self._eager_draft_extend(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(
                replan_equivalent=self.flags.dp_attention_on
            )
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: tp_worker.TpModelWorker.forward_batch_generation(forward_batch=..., skip_attn_backend_init=True) on the draft TpModelWorker after a draft-extend plan
    # expect: SG106
    def _draft_extend_via_tp_worker(self, forward_batch: ForwardBatch):
        skip = False
        if self._eager_draft_extend(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            skip = True
        result = self.draft_worker.forward_batch_generation(
            None,
            forward_batch=forward_batch,
            skip_attn_backend_init=skip,
            is_verify=True,
        )
        return result.logits_output

    # idiom: eagle_worker.EAGLEWorker.forward_draft_extend_after_decode legacy kwarg carried in a kwargs dict
    # expect: SG106
    def _draft_extend_kwargs(self, forward_batch: ForwardBatch):
        fwd_kwargs: Dict[str, Any] = {}
        if self._eager_draft_extend(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            fwd_kwargs["skip_attn_backend_init"] = True
        return self.draft_runner.forward(forward_batch, **fwd_kwargs).logits_output

    # idiom: eagle_worker_common.prepare_for_draft_extend wrapped in try/except so a planning failure falls back to the runner
    # expect: SG106
    def _draft_extend_try_fast(self, forward_batch: ForwardBatch):
        if self._eager_draft_extend(forward_batch):
            try:
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            except (RuntimeError, NotImplementedError) as exc:
                logger.warning("draft-extend pre-plan failed, runner will plan: %s", exc)
                forward_batch.forward_metadata_ready = False
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_common.prepare_for_draft_extend pre-plan skipped whenever the batch carries DP sync counts (global_num_tokens_cpu)
    # expect: clean
    def _draft_extend_guarded(self, forward_batch: ForwardBatch):
        if self._eager_draft_extend(forward_batch) and not plan_utils.dp_padding_expected(
            forward_batch
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_common.prepare_for_draft_extend with explicit DP handling that only trusts re-planning for DECODE batches
    # expect: SG106
    def _draft_extend_decode_only_replan(self, forward_batch: ForwardBatch):
        if not self._eager_draft_extend(forward_batch):
            return self.draft_runner.forward(forward_batch).logits_output
        replan_ok = self.flags.dp_attention_on and forward_batch.forward_mode.is_decode()
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_ok)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: eagle_worker_v2.EagleDraftWorker.draft_forward step loop run on the runner's own backend, each ModelRunner.forward planning the padded batch
    # expect: clean
    def _draft_steps_runner_planned(
        self, forward_batch: ForwardBatch, step_input_ids: List[torch.Tensor]
    ):
        outputs = []
        for i, input_ids in enumerate(step_input_ids):
            if i == self.speculative_num_steps - 1:
                break
            forward_batch.input_ids = input_ids
            outputs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outputs

    # idiom: eagle_worker_v2.EagleDraftWorker._draft_forward_idle: idle ranks still enter every step forward, nothing planned
    # expect: clean
    def _draft_idle_steps(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            return None
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                self.draft_runner.forward(forward_batch)
        return None


class VendorFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # idiom: frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker.draft_forward seed iter: _init_frozen_kv_metadata (plan + mark in the target-KV view) then draft_model_runner.forward
    # expect: SG106
    def _seed_iter(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return None
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = spec_info.bonus_tokens
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: frozen_kv_mtp_worker_v2 seed iter reordered: ModelRunner._prepare_eager_forward_batch first, then _init_frozen_kv_metadata on the padded batch, then EagerRunner.execute
    # expect: clean
    def _seed_iter_padded_first(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return None
        runner = self.draft_model_runner
        padded = plan_utils.pad_for_dp(runner, forward_batch)
        self._init_frozen_kv_metadata(forward_batch)
        spec_info = forward_batch.spec_info
        forward_batch.input_ids = plan_utils_pad_ids(spec_info.bonus_tokens, forward_batch)
        self._set_positions(forward_batch)
        with (
            self._target_kv_pool_view(forward_batch),
            forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend),
                forward_batch=forward_batch,
            ),
        ):
            ret = runner.eager_runner.execute(forward_batch)
        if padded:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret


def plan_utils_pad_ids(ids: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor:
    """Keep the seed ids aligned with a batch that may have been MLP-sync padded."""
    n = forward_batch.batch_size
    if ids.shape[0] >= n:
        return ids[:n]
    return torch.cat([ids, ids.new_zeros(n - ids.shape[0])])


def run_vendor_draft_extend(
    worker: VendorEagleDraftWorker, forward_batch: ForwardBatch, policy: Optional[str] = None
):
    """Entry used by the vendor orchestrator; the policy comes from deployment config."""
    import os

    policy = policy or os.environ.get("VENDOR_EAGLE_DRAFT_EXTEND_POLICY", "guarded")
    table = {
        "dp_inverted": worker._draft_extend_dp_inverted,
        "dp_keyed": worker._draft_extend_dp_keyed,
        "tp_worker": worker._draft_extend_via_tp_worker,
        "kwargs": worker._draft_extend_kwargs,
        "try_fast": worker._draft_extend_try_fast,
        "decode_only_replan": worker._draft_extend_decode_only_replan,
    }
    return table.get(policy, worker._draft_extend_guarded)(forward_batch)

"""DFlash-like block drafter: one draft forward proposes a whole block.

The base class owns batch construction and the forward; variants differ only
in how they pre-plan the attention metadata for the block forward (one
overridden method each). The DP-attention variants drive the eager runner
directly so they can normalise the batch themselves.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

from blindsg29.config import VendorServingFlags, get_vendor_flags
from blindsg29.reliability import plan_utils

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class BlockDrafterBase:
    def __init__(
        self,
        draft_model_runner: "ModelRunner",
        block_graph_runner: Any = None,
        flags: Optional[VendorServingFlags] = None,
    ):
        self.draft_model_runner = draft_model_runner
        self.block_graph_runner = block_graph_runner
        self.flags = flags or get_vendor_flags()
        self.block_size = self.flags.block_drafter_size

    @property
    def attn_backend(self):
        return self.draft_model_runner.attn_backend

    # Built through ForwardBatch.init_new so the DP sync fields are populated.
    def _build_block_batch(self, batch: "ScheduleBatch") -> ForwardBatch:
        bs = len(batch.seq_lens)
        if not batch.forward_mode.is_idle():
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
            batch.spec_info = EagleDraftExtendInput(
                hidden_states=None,
                num_tokens_per_req=self.block_size,
                num_tokens_for_logprob_per_req=self.block_size,
            )
            batch.extend_lens = [self.block_size] * bs
            batch.extend_num_tokens = bs * self.block_size
        return ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )

    # idiom: dflash_worker_v2.DFlashWorkerV2 draft forward: base block forward that warms the backend and leaves planning to ModelRunner.forward
    # expect: clean
    def _run_block(self, forward_batch: ForwardBatch):
        plan_utils.plan_only(self.attn_backend, forward_batch)
        return self.draft_model_runner.forward(forward_batch).logits_output

    # idiom: dflash_worker_v2.DFlashWorkerV2.forward_batch_generation draft step with an idle early-exit, dispatching to the overridable block forward
    # expect: clean
    def forward_block(self, batch: "ScheduleBatch"):
        forward_batch = self._build_block_batch(batch)
        if forward_batch.forward_mode.is_idle():
            return self.draft_model_runner.forward(forward_batch).logits_output
        return self._run_block(forward_batch)

    def _graph_ok(self, forward_batch: ForwardBatch) -> bool:
        return plan_utils.decode_graph_can_run(self.block_graph_runner, forward_batch)


class PreplannedBlockDrafter(BlockDrafterBase):
    # idiom: eagle_worker_common.prepare_for_draft_extend (plan + mark) fused into the block forward of a subclass overriding one method
    # expect: SG106
    def _run_block(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_model_runner.forward(forward_batch).logits_output


class ReplanSafeBlockDrafter(BlockDrafterBase):
    # idiom: eagle_worker_common.prepare_for_draft_extend in a subclass override, marked replan_equivalent=True (same runner backend) so the padded batch is re-planned
    # expect: clean
    def _run_block(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_model_runner.forward(forward_batch).logits_output


class PadFirstBlockDrafter(BlockDrafterBase):
    # idiom: model_runner.ModelRunner._prepare_eager_forward_batch run first, then plan + mark on the padded batch and EagerRunner.execute
    # expect: clean
    def _run_block(self, forward_batch: ForwardBatch):
        plan_utils.pad_for_dp(self.draft_model_runner, forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)


class EagerBlockDrafter(BlockDrafterBase):
    """DP-attention variants that normalise the batch before the eager runner.

    The variant is picked per deployment with VENDOR_EAGER_BLOCK_POLICY.
    """

    def _run_block(self, forward_batch: ForwardBatch):
        policy = self.flags.extra.get(
            "eager_block_policy",
            os.environ.get("VENDOR_EAGER_BLOCK_POLICY", "replan_after_pad"),
        )
        impl = {
            "mark_then_pad": self._run_block_mark_then_pad,
            "mark_after_pad": self._run_block_mark_after_pad,
            "remark": self._run_block_remark,
            "clear_after_pad": self._run_block_clear_after_pad,
            "mark_true_then_pad": self._run_block_mark_true_then_pad,
        }.get(policy, self._run_block_replan_after_pad)
        return impl(forward_batch)

    # idiom: eagle_worker_common.prepare_for_draft_extend then the runner's own MLP-sync padding step, invoked explicitly before EagerRunner.execute
    # expect: SG106
    def _run_block_mark_then_pad(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        plan_utils.pad_for_dp(self.draft_model_runner, forward_batch)
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)

    # idiom: forward_batch_info.ForwardBatch.mark_forward_metadata_ready called after prepare_mlp_sync_batch while the plan itself was built before padding
    # expect: SG106
    def _run_block_mark_after_pad(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(self.draft_model_runner)
        forward_batch.mark_forward_metadata_ready()
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)

    # idiom: mark_forward_metadata_ready(replan_equivalent=True) refreshed after padding, so the plan record matches the padded shapes of a pre-pad plan
    # expect: SG106
    def _run_block_remark(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if plan_utils.pad_for_dp(self.draft_model_runner, forward_batch):
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)

    # idiom: eagle_worker_common.prepare_for_draft_extend, readiness flag dropped after the explicit MLP-sync padding so EagerRunner plans
    # expect: clean
    def _run_block_clear_after_pad(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if plan_utils.pad_for_dp(self.draft_model_runner, forward_batch):
            forward_batch.forward_metadata_ready = False
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)

    # idiom: dllm/algorithm/base.py mark_forward_metadata_ready(replan_equivalent=True) before the explicit padding; needs_forward_metadata_init sees the shape change
    # expect: clean
    def _run_block_mark_true_then_pad(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        plan_utils.pad_for_dp(self.draft_model_runner, forward_batch)
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)

    # idiom: eagle_worker_common.prepare_for_draft_extend followed by a second init_forward_metadata on the padded batch before EagerRunner.execute
    # expect: clean
    def _run_block_replan_after_pad(self, forward_batch: ForwardBatch):
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if plan_utils.pad_for_dp(self.draft_model_runner, forward_batch):
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return plan_utils.run_eager(self.draft_model_runner, forward_batch)


class TupleBlockDrafter(BlockDrafterBase):
    # idiom: eagle_worker_common.prepare_for_draft returning (forward_batch, can_run_graph) with the plan + mark done inside the helper
    # expect: SG106
    def _run_block(self, forward_batch: ForwardBatch):
        forward_batch, can_graph = plan_utils.planned_pair(
            self.attn_backend, forward_batch, self._graph_ok(forward_batch)
        )
        if can_graph:
            return self.block_graph_runner.execute(forward_batch)
        logits_output, _ = plan_utils.forward_and_unwrap(
            self.draft_model_runner, forward_batch
        )
        return logits_output


class FlaggedBlockDrafter(BlockDrafterBase):
    # idiom: dllm/algorithm/base.py mark_forward_metadata_ready(replan_equivalent=...) with the option chosen by a fast-path flag through a ternary kwargs dict
    # expect: SG106
    def _run_block(self, forward_batch: ForwardBatch):
        mark_kwargs = (
            {} if self.flags.block_drafter_fast_path else {"replan_equivalent": True}
        )
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**mark_kwargs)
        return self.draft_model_runner.forward(forward_batch).logits_output


class DpAwareBlockDrafter(BlockDrafterBase):
    # idiom: dllm/algorithm/base.py replan_equivalent choice, keyed on the DP sync state of this very batch (global_num_tokens_cpu) rather than a flag
    # expect: clean
    def _run_block(self, forward_batch: ForwardBatch):
        will_pad = plan_utils.dp_padding_expected(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=will_pad)
        return self.draft_model_runner.forward(forward_batch).logits_output

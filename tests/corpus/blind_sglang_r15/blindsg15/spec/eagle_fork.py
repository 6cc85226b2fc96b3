"""Fork EAGLE draft worker.

Differences from upstream ``EagleDraftWorker``: the draft-extend after verify
can run without the draft-extend CUDA graph (``--fork-eager-draft-extend``),
planning is scheduled by the worker instead of the runner, and a few debug
paths probe the backend before the forward.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Dict, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import (
    prepare_for_draft,
    prepare_for_draft_extend,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg15.spec.planning import pad_for_dp

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(EagleDraftWorker):
    # Mark options used by the eager draft-extend. The DSA indexer in our
    # draft cannot rebuild its schedule on a DP-padded batch, so the default
    # keeps the upstream "planned pre-pad, do not re-plan" behaviour.
    _mark_kwargs: Dict[str, bool] = {"replan_equivalent": False}
    # Non-DSA drafts opt in to the post-pad re-plan.
    _mark_kwargs_replan: Dict[str, bool] = {"replan_equivalent": True}

    _staged: Optional[ForwardBatch] = None

    @property
    def _extend_backend(self):
        return self.draft_runner.attn_backend

    @property
    def _replan_after_pad(self) -> bool:
        # The fork only ships DSA drafts on this worker.
        return False

    @property
    def _replan_after_pad_plain(self) -> bool:
        return True

    def _build_extend_batch(
        self,
        batch,
        draft_extend_input: EagleDraftExtendInput,
        next_token_ids: torch.Tensor,
    ) -> ForwardBatch:
        batch.spec_info = draft_extend_input
        batch.input_ids = next_token_ids
        batch.forward_mode = (
            ForwardMode.IDLE
            if batch.forward_mode.is_idle()
            else ForwardMode.DRAFT_EXTEND_V2
        )
        return ForwardBatch.init_new(
            batch,
            self.draft_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )

    # ------------------------------------------------------------------
    # Draft extend after verify (eager)
    # ------------------------------------------------------------------

    # expect: SG106
    def draft_extend_after_verify(self, batch, draft_extend_input, next_token_ids):
        # No graph runner: upstream's helper plans the eager batch itself and
        # marks it, so the runner below must not plan again.
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_after_verify_optin(
        self, batch, draft_extend_input, next_token_ids
    ):
        forward_batch = prepare_for_draft_extend(
            draft_extend_input,
            batch,
            next_token_ids,
            self.speculative_num_draft_tokens,
            self.draft_runner,
            None,
            return_hidden_states_before_norm=False,
        )
        # Our drafts are plain MLA (no DSA indexer, checked at load time): the
        # forward path's own init_forward_metadata on draft_runner.attn_backend
        # is the same plan, so let it re-plan once DP padding reshapes the batch.
        forward_batch.forward_metadata_replan_equivalent = True
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_legacy_skip(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_runner.forward(forward_batch).logits_output
        forward_batch.can_run_dp_cuda_graph = False
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # 0.5.x call style kept for the fork's older launcher.
        return self.draft_runner.forward(
            forward_batch, skip_attn_backend_init=True
        ).logits_output

    # expect: SG106
    def draft_extend_attr_mark(self, forward_batch: ForwardBatch):
        backend = self._extend_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True
        output = self.draft_runner.forward(forward_batch)
        return output.logits_output

    # expect: clean
    def draft_extend_replannable(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._extend_backend.init_forward_metadata(forward_batch)
            # Same backend object the forward path plans with: a post-pad
            # re-plan is equivalent, so opt in.
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_graph_or_eager(
        self, forward_batch: ForwardBatch, select_index: torch.Tensor
    ):
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, select_index)
        # Eager: leave the batch unplanned; ModelRunner plans after padding.
        logits_output = self.draft_runner.forward(forward_batch).logits_output
        logits_output.next_token_logits = logits_output.next_token_logits[
            select_index
        ]
        return logits_output

    # expect: SG106
    def draft_extend_dp_gated_inverted(self, forward_batch: ForwardBatch):
        if get_parallel().attn_dp_enabled and not forward_batch.forward_mode.is_idle():
            # DP ranks must see the same metadata: plan once up front.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_dp_gated(self, forward_batch: ForwardBatch):
        if not require_mlp_sync() and not forward_batch.forward_mode.is_idle():
            # No MLP-sync padding will run on this deployment, so the pre-plan
            # already describes the batch the forward sees.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_try_plan(self, forward_batch: ForwardBatch):
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        except NotImplementedError:
            logger.warning_once("draft backend cannot pre-plan; planning in forward")
        else:
            forward_batch.mark_forward_metadata_ready()
        finally:
            forward_batch.can_run_dp_cuda_graph = False
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_try_plan_replannable(self, forward_batch: ForwardBatch):
        try:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        except NotImplementedError:
            logger.warning_once("draft backend cannot pre-plan; planning in forward")
        else:
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        finally:
            forward_batch.can_run_dp_cuda_graph = False
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_partial_mark(self, forward_batch: ForwardBatch):
        mark = functools.partial(
            forward_batch.mark_forward_metadata_ready,
            replan_equivalent=self._replan_after_pad,
        )
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        mark()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_partial_mark_plain(self, forward_batch: ForwardBatch):
        mark = functools.partial(
            forward_batch.mark_forward_metadata_ready,
            replan_equivalent=self._replan_after_pad_plain,
        )
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        mark()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_dict_mark(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_dict_mark_replan(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**self._mark_kwargs_replan)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_replace_marked(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Hand the runner a shallow copy so the caller's batch keeps its
        # original flags.
        planned = dataclasses.replace(forward_batch, forward_metadata_ready=True)
        return self.draft_runner.forward(planned).logits_output

    # expect: clean
    def draft_extend_probe_copy(self, forward_batch: ForwardBatch):
        # Size the backend's workspace on a throwaway copy; the real batch is
        # left unplanned and the runner plans it after padding.
        probe = dataclasses.replace(forward_batch)
        self.draft_runner.attn_backend.init_forward_metadata(probe)
        probe.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_server_args_mark(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # The DSA indexer only refuses a re-plan on DP-padded batches, so
        # allow the re-plan everywhere else.
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=not self.server_args.enable_dp_attention
        )
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_replan_post_pad(self, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        pad_for_dp(forward_batch, self.draft_runner)
        if (
            forward_batch.batch_size != forward_batch.forward_metadata_planned_bs
            or forward_batch.input_ids.shape[0]
            != forward_batch.forward_metadata_planned_num_tokens
        ):
            # Padding reshaped the batch: plan the final batch and record it.
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        ret = self.draft_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # ------------------------------------------------------------------
    # Staged extend: plan in one method, launch in another
    # ------------------------------------------------------------------
    def _stage_draft_extend(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._staged = forward_batch

    def _launch_staged(self):
        forward_batch = self._staged
        self._staged = None
        return self.draft_runner.forward(forward_batch).logits_output

    def _stage_padded_draft_extend(self, forward_batch: ForwardBatch) -> None:
        pad_for_dp(forward_batch, self.draft_runner)
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._staged = forward_batch

    def _launch_staged_eager(self):
        forward_batch = self._staged
        self._staged = None
        ret = self.draft_runner.eager_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.post_forward_mlp_sync_batch(ret)
        return ret

    # expect: SG106
    def run_draft_extend_step(self, forward_batch: ForwardBatch):
        self._stage_draft_extend(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.draft_runner.attn_backend),
            forward_batch=forward_batch,
        ):
            return self._launch_staged()

    # expect: clean
    def run_draft_extend_step_padded(self, forward_batch: ForwardBatch):
        self._stage_padded_draft_extend(forward_batch)
        with forward_context(
            ForwardContext(attn_backend=self.draft_runner.attn_backend),
            forward_batch=forward_batch,
        ):
            return self._launch_staged_eager()

    # ------------------------------------------------------------------
    # Multi-step draft decode without the draft CUDA graph
    # ------------------------------------------------------------------

    # expect: SG106
    def draft_eager(self, batch):
        draft_input = batch.spec_info
        forward_batch, _, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    # expect: clean
    def draft_guarded(self, batch):
        if require_mlp_sync():
            raise NotImplementedError(
                "eager multi-step draft is not supported with DP attention / "
                "MLP sync; enable the draft CUDA graph"
            )
        draft_input = batch.spec_info
        forward_batch, _, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            None,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not forward_batch.forward_mode.is_idle() and self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    # expect: clean
    def draft_with_graph(self, batch):
        draft_input = batch.spec_info
        forward_batch, can_run_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if not can_run_graph:
            raise RuntimeError(
                f"fork draft requires the draft CUDA graph (bs={forward_batch.batch_size})"
            )
        # The graph runner plans its padded static batch inside replay.
        return self.cuda_graph_runner.execute(forward_batch)

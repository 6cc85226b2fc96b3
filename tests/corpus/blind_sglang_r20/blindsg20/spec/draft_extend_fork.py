"""Eager draft-extend strategies for the fork's EAGLE worker.

After verify, the draft model re-runs over the verify window to fill its KV
cache ("draft extend").  When the draft-extend CUDA graph cannot serve the
batch, the forward goes through ``ModelRunner.forward``; under DP attention
that pads the batch (``prepare_mlp_sync_batch``) and then plans only if
``ForwardBatch.needs_forward_metadata_init()`` says so.

The worker picks a strategy class by ``--speculative-draft-extend-strategy``
(fork flag); each subclass overrides ``_run_eager_draft_extend``.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import fast_topk

from blindsg20.common.flags import ForkSpecFlags
from blindsg20.common.planning import (
    batch_will_pad,
    clear_forward_metadata_mark,
    pad_for_mlp_sync,
    plan_and_mark,
)
from blindsg20.spec._builders import (
    build_eager_draft_extend_batch,
    select_last_accepted,
)

logger = logging.getLogger(__name__)


class _EagerDraftExtendWorker(EagleDraftWorker):
    """Draft extend with a pluggable eager strategy."""

    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        ndt = self.speculative_num_draft_tokens
        forward_batch = build_eager_draft_extend_batch(
            batch, batch_result, self.draft_runner, ndt
        )
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            bs = forward_batch.batch_size
            select_index = (
                torch.arange(0, bs * ndt, ndt, device=self.device)
                + batch_result.accept_lens
                - 1
            )
            logits_output = runner.execute(forward_batch, select_index)
        else:
            if forward_batch.forward_mode.is_idle():
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            else:
                logits_output = self._run_eager_draft_extend(forward_batch)
            logits_output = select_last_accepted(
                logits_output, batch_result.accept_lens, ndt
            )
        self._publish_next_draft_input(batch_result, logits_output)

    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        return self.draft_runner.forward(forward_batch).logits_output

    def _publish_next_draft_input(self, batch_result, logits_output) -> None:
        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states


class UpstreamPrepDraftExtendWorker(EagleDraftWorker):
    """Keeps upstream's plan-stream preparation, adds acceptance telemetry."""

    accept_histogram: Optional[torch.Tensor] = None

    def _record_accept_histogram(self, accept_lens: torch.Tensor) -> None:
        counts = torch.bincount(
            accept_lens.to(torch.int64), minlength=self.speculative_num_draft_tokens + 1
        )
        if self.accept_histogram is None:
            self.accept_histogram = torch.zeros_like(counts)
        self.accept_histogram[: counts.numel()] += counts

    # expect: SG106
    def _draft_extend_for_decode(
        self,
        batch: ScheduleBatch,
        batch_result: GenerationBatchResult,
        *,
        kv_loc_plan: Optional[KVLocPlan] = None,
    ):
        ndt = self.speculative_num_draft_tokens
        accept_lens = batch_result.accept_lens
        draft_extend_input = EagleDraftExtendInput(
            hidden_states=batch_result.logits_output.hidden_states,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=ndt,
            num_tokens_for_logprob_per_req=ndt,
        )
        if self.plan_stream:
            self.plan_stream.wait_stream(
                torch.get_device_module(self.device).current_stream()
            )
        with self.plan_stream_ctx:
            forward_batch = prepare_for_draft_extend(
                draft_extend_input,
                batch,
                batch_result.next_token_ids.to(torch.int64),
                ndt,
                self.draft_runner,
                self.cuda_graph_runner_for_draft_extend,
                return_hidden_states_before_norm=False,
                kv_loc_plan=kv_loc_plan,
            )
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

        runner = self.cuda_graph_runner_for_draft_extend
        bs = len(batch.seq_lens)
        select_index = torch.arange(0, bs * ndt, ndt, device=self.device) + accept_lens - 1
        if runner is not None and runner.can_run_graph(forward_batch):
            logits_output = runner.execute(forward_batch, select_index)
        else:
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            logits_output.next_token_logits = logits_output.next_token_logits[
                select_index
            ]
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = logits_output.hidden_states[select_index]
        self._record_accept_histogram(accept_lens)

        topk_p, topk_index = fast_topk(
            torch.softmax(logits_output.next_token_logits, dim=-1), self.topk, dim=-1
        )
        next_draft_input = batch_result.next_draft_input
        next_draft_input.topk_p = topk_p
        next_draft_input.topk_index = topk_index
        next_draft_input.hidden_states = logits_output.hidden_states


class LegacyDraftExtendWorker(_EagerDraftExtendWorker):
    """Entry point kept for the fork's v1-era scheduler integration."""

    # expect: SG106
    def forward_draft_extend_after_decode(
        self, batch: ScheduleBatch, batch_result: GenerationBatchResult
    ):
        ndt = self.speculative_num_draft_tokens
        forward_batch = build_eager_draft_extend_batch(
            batch, batch_result, self.draft_runner, ndt
        )
        runner = self.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            bs = forward_batch.batch_size
            select_index = (
                torch.arange(0, bs * ndt, ndt, device=self.device)
                + batch_result.accept_lens
                - 1
            )
            logits_output = runner.execute(forward_batch, select_index)
        else:
            if not forward_batch.forward_mode.is_idle():
                self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            logits_output = select_last_accepted(
                logits_output, batch_result.accept_lens, ndt
            )
        self._publish_next_draft_input(batch_result, logits_output)


class KwargsDraftExtendWorker(_EagerDraftExtendWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Pre-planned forwards tell the runner not to plan a second time.
        self._preplanned_forward_kwargs = {"skip_attn_backend_init": True}

    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch, **self._preplanned_forward_kwargs
        ).logits_output


class MarkKwargsDraftExtendWorker(_EagerDraftExtendWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Same backend object the forward path would plan: a post-pad
        # re-plan is equivalent to ours.
        self._mark_kwargs = {"replan_equivalent": True}

    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(**self._mark_kwargs)
        return self.draft_runner.forward(forward_batch).logits_output


class PartialPlanDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        plan = partial(self.draft_runner.attn_backend.init_forward_metadata, forward_batch)
        mark = forward_batch.mark_forward_metadata_ready
        plan()
        mark()
        return self.draft_runner.forward(forward_batch).logits_output


class PartialReplanDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        plan = partial(self.draft_runner.attn_backend.init_forward_metadata, forward_batch)
        mark = partial(forward_batch.mark_forward_metadata_ready, replan_equivalent=True)
        plan()
        mark()
        return self.draft_runner.forward(forward_batch).logits_output


class FlagAssignDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.forward_metadata_ready = True
        return self.draft_runner.forward(forward_batch).logits_output


class DsaSafeDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.seed_dsa_topk_from_draft_extend:
            # The DSA indexer cannot rebuild its schedule on a DP-padded batch
            # (see #27091); keep the pre-pad plan as-is.
            forward_batch.forward_metadata_replan_equivalent = False
        return self.draft_runner.forward(forward_batch).logits_output


class PadThenMarkDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Pad now so the plan record carries the shapes the forward will see.
        pad_for_mlp_sync(forward_batch, self.draft_runner)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class PlanStreamDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        device_module = torch.get_device_module(self.device)
        if self.plan_stream:
            self.plan_stream.wait_stream(device_module.current_stream())
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        if self.plan_stream:
            device_module.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output


class PlanStreamReplanDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        device_module = torch.get_device_module(self.device)
        if self.plan_stream:
            self.plan_stream.wait_stream(device_module.current_stream())
        with self.plan_stream_ctx:
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        if self.plan_stream:
            device_module.current_stream().wait_stream(self.plan_stream)
        return self.draft_runner.forward(forward_batch).logits_output


class DeprecatedMarkDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        # Same effect as the old skip_attn_backend_init=True call sites.
        forward_batch.apply_deprecated_skip_attn_backend_init(True)
        return self.draft_runner.forward(forward_batch).logits_output


class EnvReplanDraftExtendWorker(_EagerDraftExtendWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self._fork_flags = ForkSpecFlags.from_server_args(server_args)

    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        plan_and_mark(
            self.draft_runner.attn_backend,
            forward_batch,
            replan_equivalent=self._fork_flags.allow_post_pad_replan,
        )
        return self.draft_runner.forward(forward_batch).logits_output


class BoundForwardDraftExtendWorker(_EagerDraftExtendWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._forward_preplanned = partial(
            self.draft_runner.forward, skip_attn_backend_init=True
        )

    # expect: SG106
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self._forward_preplanned(forward_batch).logits_output


class ReplanEquivalentDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        # Planned on the draft runner's own backend, so ModelRunner.forward's
        # post-pad plan is equivalent: let it re-plan when padding reshapes.
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output


class DropMarkDraftExtendWorker(_EagerDraftExtendWorker):
    def _prep(self, forward_batch: ForwardBatch) -> None:
        # Shared with the fork's graph-warmup path.
        plan_and_mark(self.draft_runner.attn_backend, forward_batch)

    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self._prep(forward_batch)
        if batch_will_pad(forward_batch):
            # DP attention reshapes the batch inside forward; let it plan there.
            clear_forward_metadata_mark(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class NoSyncOnlyDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is None:
            # No MLP sync: the forward runs exactly this batch.
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output


class ComputedSkipDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(
            forward_batch,
            skip_attn_backend_init=not batch_will_pad(forward_batch),
        ).logits_output


class EarlyReturnDraftExtendWorker(_EagerDraftExtendWorker):
    # expect: clean
    def _run_eager_draft_extend(self, forward_batch: ForwardBatch):
        if forward_batch.global_num_tokens_cpu is not None:
            return self.draft_runner.forward(forward_batch).logits_output
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

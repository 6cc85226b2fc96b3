"""Fork draft workers: SGLang's EAGLE v2 / frozen-KV MTP draft workers with
planning moved into mixins, view-planning base classes and staged batches."""

from __future__ import annotations

from typing import Any, List, Optional

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

from blindsg40.spec.components import EagerModelRunner, MlpSyncPadder, PlannedDraft


class PrePlanMixin:
    def _preplan(self, forward_batch: ForwardBatch) -> None:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class DpAwarePrePlanMixin:
    def _preplan(self, forward_batch: ForwardBatch) -> bool:
        if is_dp_attention_enabled():
            return False
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return True


class _ForkDraftMixinHost:
    def _prepare_decode(self, batch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )

    def _run_steps(self, forward_batch: ForwardBatch) -> List[Any]:
        outputs = []
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                outputs.append(self.draft_runner.forward(forward_batch).logits_output)
        return outputs


class ForkEagleDraftWorker(PrePlanMixin, _ForkDraftMixinHost, EagleDraftWorker):
    # expect: SG106
    def draft_eager(self, batch):
        forward_batch, can_run_graph, _ = self._prepare_decode(batch)
        if can_run_graph or forward_batch.forward_mode.is_idle():
            return self.cuda_graph_runner.execute(forward_batch) if can_run_graph else None
        self._preplan(forward_batch)
        return self._run_steps(forward_batch)

    # expect: SG106
    def draft(self, batch, *, with_topology: bool = False):
        forward_batch, can_run_graph, _ = self._prepare_decode(batch)
        if self.cuda_graph_runner is not None and not forward_batch.forward_mode.is_idle():
            # A captured runner exists: pre-plan once for either path.
            self._preplan(forward_batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        return self.draft_forward(forward_batch)


class DpAwareEagleDraftWorker(DpAwarePrePlanMixin, _ForkDraftMixinHost, EagleDraftWorker):
    # expect: clean
    def draft_eager(self, batch):
        forward_batch, can_run_graph, _ = self._prepare_decode(batch)
        if can_run_graph or forward_batch.forward_mode.is_idle():
            return self.cuda_graph_runner.execute(forward_batch) if can_run_graph else None
        self._preplan(forward_batch)
        return self._run_steps(forward_batch)

    # expect: clean
    def draft(self, batch, *, with_topology: bool = False):
        forward_batch, can_run_graph, _ = self._prepare_decode(batch)
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            return self._draft_padded_first(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    def _draft_padded_first(self, forward_batch: ForwardBatch):
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        outputs = []
        for i in range(self.speculative_num_steps - 1):
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                outputs.append(
                    self.draft_runner.model.forward(
                        forward_batch.input_ids, forward_batch.positions, forward_batch
                    )
                )
        return outputs


class ForkFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    # expect: SG106
    def seed_forward(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        with self._target_kv_pool_view(forward_batch):
            return self.draft_model_runner.forward(forward_batch).logits_output

    # expect: clean
    def seed_forward_padded_first(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        padder = MlpSyncPadder(self.draft_model_runner)
        padder.pad(forward_batch)
        if forward_batch.needs_forward_metadata_init():
            self._init_frozen_kv_metadata(forward_batch)
        with self._target_kv_pool_view(forward_batch):
            out = self.draft_model_runner.model.forward(
                forward_batch.input_ids, forward_batch.positions, forward_batch
            )
        return padder.unpad(forward_batch, out)


class _ViewPlannerBase:
    def __init__(self, draft_runner: Any, view_factory: Any):
        self.draft_runner = draft_runner
        self.view_factory = view_factory

    def plan_in_view(self, forward_batch: ForwardBatch) -> None:
        with self.view_factory(forward_batch):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()


class ViewDraftExtend(_ViewPlannerBase):
    # expect: SG106
    def run(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        self.plan_in_view(forward_batch)
        with self.view_factory(forward_batch):
            return self.draft_runner.forward(forward_batch).logits_output


class PaddedViewDraftExtend(_ViewPlannerBase):
    # expect: clean
    def run(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        padder = MlpSyncPadder(self.draft_runner)
        padder.pad(forward_batch)
        self.plan_in_view(forward_batch)
        with self.view_factory(forward_batch):
            out = EagerModelRunner(self.draft_runner).run(forward_batch)
        return padder.unpad(forward_batch, out)


class StagedDraftExtend:
    """Plans on the plan stream in ``stage*``; launches on the compute stream."""

    def __init__(self, draft_runner: Any):
        self.draft_runner = draft_runner
        self._staged: Optional[ForwardBatch] = None
        self._staged_replannable: Optional[ForwardBatch] = None

    def stage(self, forward_batch: ForwardBatch) -> None:
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self._staged = forward_batch

    def stage_replannable(self, forward_batch: ForwardBatch) -> None:
        forward_batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        self._staged_replannable = forward_batch

    # expect: SG106
    def launch(self):
        forward_batch, self._staged = self._staged, None
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def launch_replannable(self):
        forward_batch, self._staged_replannable = self._staged_replannable, None
        return self.draft_runner.forward(forward_batch).logits_output


class BatchedDecodeDraft:
    def __init__(self, draft_runner: Any):
        self.draft_runner = draft_runner
        self.padder = MlpSyncPadder(draft_runner)
        self.eager = EagerModelRunner(draft_runner)

    # expect: SG106
    def run_all(self, forward_batches: List[ForwardBatch]):
        for fb in forward_batches:
            fb.forward_mode = ForwardMode.DECODE
            self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        return [self.draft_runner.forward(fb).logits_output for fb in forward_batches]

    # expect: clean
    def run_all_padded_first(self, forward_batches: List[ForwardBatch]):
        for fb in forward_batches:
            fb.forward_mode = ForwardMode.DECODE
            self.padder.pad(fb)
            self.draft_runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()
        return [self.padder.unpad(fb, self.eager.run(fb)) for fb in forward_batches]

    def _plan_for(self, forward_batch: ForwardBatch, replannable: bool) -> PlannedDraft:
        forward_batch.forward_mode = ForwardMode.DECODE
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=replannable)
        return PlannedDraft(forward_batch, can_run_graph=False, replannable=replannable)

    # expect: SG106
    def run_planned(self, forward_batch: ForwardBatch):
        planned = self._plan_for(forward_batch, replannable=False)
        return self.draft_runner.forward(planned.forward_batch).logits_output

    # expect: clean
    def run_planned_replannable(self, forward_batch: ForwardBatch):
        planned = self._plan_for(forward_batch, replannable=True)
        return self.draft_runner.forward(planned.forward_batch).logits_output

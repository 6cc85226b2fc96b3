"""Kestrel verify / draft hooks layered over SGLang's EAGLE v2 worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from sglang.srt.layers.dp_attention import is_dp_attention_enabled
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.utils.common import require_mlp_sync

from blindsg38.vendor_config import (
    KestrelParallelConfig,
    dp_attention_active,
    draft_replan_from_env,
)


class KestrelVerifyWorker(EAGLEWorkerV2):
    def _verify_forward_batch(
        self, batch: ScheduleBatch, verify_input: EagleVerifyInput, mode: ForwardMode
    ) -> ForwardBatch:
        batch.input_ids = verify_input.draft_token
        batch.forward_mode = mode
        return ForwardBatch.init_new(
            batch,
            self.target_worker.model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
            kv_loc_plan=verify_input.kv_loc_plan,
        )

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify + eagle_worker_common.run_eagle_verify
    # expect: clean
    def _verify_preplanned(self, batch: ScheduleBatch, verify_input: EagleVerifyInput):
        model_runner = self.target_worker.model_runner
        verify_forward_batch = self._verify_forward_batch(
            batch, verify_input, ForwardMode.TARGET_VERIFY
        )
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        with self.plan_stream_ctx:
            if can_run_cuda_graph:
                graph_runner.load_batch(verify_forward_batch)
            else:
                model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )

    # idiom: speculative/eagle_utils.py eagle_prepare_for_verify + eagle_worker_common.run_eagle_verify
    # expect: SG106
    def _verify_small_tree(self, batch: ScheduleBatch, verify_input: EagleVerifyInput):
        model_runner = self.target_worker.model_runner
        mode = (
            ForwardMode.DECODE
            if verify_input.draft_token_num == 1
            else ForwardMode.TARGET_VERIFY
        )
        verify_forward_batch = self._verify_forward_batch(batch, verify_input, mode)
        graph_runner = model_runner.decode_cuda_graph_runner
        can_run_cuda_graph = bool(
            graph_runner and graph_runner.can_run_graph(verify_forward_batch)
        )
        with self.plan_stream_ctx:
            if can_run_cuda_graph:
                graph_runner.load_batch(verify_forward_batch)
            else:
                model_runner.attn_backend.init_forward_metadata(verify_forward_batch)
            verify_forward_batch.mark_forward_metadata_ready()
        return self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (graph vs eager)
    # expect: clean
    def _draft_extend_graph_or_eager(self, forward_batch: ForwardBatch, select_index):
        draft_worker = self._draft_worker
        runner = draft_worker.cuda_graph_runner_for_draft_extend
        if runner is not None and runner.can_run_graph(forward_batch):
            draft_worker.draft_extend_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return runner.execute(forward_batch, select_index)
        out = draft_worker.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (graph vs eager)
    # expect: SG106
    def _draft_extend_preplan_then_dispatch(
        self, forward_batch: ForwardBatch, select_index
    ):
        draft_worker = self._draft_worker
        runner = draft_worker.cuda_graph_runner_for_draft_extend
        draft_worker.draft_extend_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        if runner is not None and runner.can_run_graph(forward_batch):
            return runner.execute(forward_batch, select_index)
        out = draft_worker.draft_runner.forward(forward_batch).logits_output
        out.next_token_logits = out.next_token_logits[select_index]
        return out


def _make_step(runner: ModelRunner, forward_batch: ForwardBatch):
    def _step(input_ids: torch.Tensor, out_cache_loc: torch.Tensor):
        forward_batch.input_ids = input_ids
        forward_batch.out_cache_loc = out_cache_loc
        return runner.forward(forward_batch).logits_output

    return _step


def _make_replanning_step(runner: ModelRunner, backend, forward_batch: ForwardBatch):
    def _step(input_ids: torch.Tensor, out_cache_loc: torch.Tensor):
        forward_batch.input_ids = input_ids
        forward_batch.out_cache_loc = out_cache_loc
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return runner.forward(forward_batch).logits_output

    return _step


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward (step as closure)
# expect: SG106
def draft_with_closure(
    worker, forward_batch: ForwardBatch, inputs: Sequence[Tuple[torch.Tensor, torch.Tensor]]
):
    step = _make_step(worker.draft_runner, forward_batch)
    worker.draft_attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return [step(ids, loc) for ids, loc in inputs]


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft + draft_forward (step as closure)
# expect: clean
def draft_with_closure_replan(
    worker, forward_batch: ForwardBatch, inputs: Sequence[Tuple[torch.Tensor, torch.Tensor]]
):
    step = _make_replanning_step(
        worker.draft_runner, worker.draft_runner.attn_backend, forward_batch
    )
    return [step(ids, loc) for ids, loc in inputs]


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (eager draft extend, try/finally)
# expect: SG106
def forward_draft_extend_restoring(
    runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    saved_positions = forward_batch.positions
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    try:
        return runner.forward(forward_batch).logits_output
    finally:
        forward_batch.positions = saved_positions


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (eager draft extend, try/finally)
# expect: clean
def forward_draft_extend_restoring_padded(
    runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    saved_positions = forward_batch.positions
    try:
        if forward_batch.global_num_tokens_cpu is not None:
            forward_batch.prepare_mlp_sync_batch(runner)
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return runner.forward(forward_batch).logits_output
    finally:
        forward_batch.positions = saved_positions


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (skip pre-plan early)
# expect: clean
def draft_extend_skip_preplan_under_sync(
    runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    if require_mlp_sync():
        return runner.forward(forward_batch).logits_output
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft (skip pre-plan early)
# expect: SG106
def draft_extend_skip_preplan_when_idle(
    runner: ModelRunner, backend, forward_batch: ForwardBatch
):
    if forward_batch.forward_mode.is_idle():
        return runner.forward(forward_batch).logits_output
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    return runner.forward(forward_batch).logits_output


@dataclass
class PreplanRecord:
    forward_batch: ForwardBatch
    replan_equivalent: bool = False

    def seal(self) -> ForwardBatch:
        self.forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_equivalent
        )
        return self.forward_batch


# idiom: model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (record object)
# expect: SG106
def run_sealed_draft_extend(
    runner: ModelRunner, forward_batch: ForwardBatch, cfg: KestrelParallelConfig
):
    record = PreplanRecord(forward_batch, replan_equivalent=cfg.dcp_enabled)
    runner.attn_backend.init_forward_metadata(forward_batch)
    return runner.forward(record.seal()).logits_output


# idiom: model_executor/forward_batch_info.py ForwardBatch.mark_forward_metadata_ready (record object)
# expect: clean
def run_sealed_draft_extend_synced(
    runner: ModelRunner, forward_batch: ForwardBatch, cfg: KestrelParallelConfig
):
    record = PreplanRecord(forward_batch, replan_equivalent=cfg.needs_mlp_sync)
    runner.attn_backend.init_forward_metadata(forward_batch)
    return runner.forward(record.seal()).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (replan flag from env)
# expect: SG106
def run_draft_extend_env_replan(runner: ModelRunner, forward_batch: ForwardBatch):
    replan = draft_replan_from_env()
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
    return runner.forward(forward_batch).logits_output


# idiom: speculative/eagle_worker_common.py prepare_for_draft_extend (replan flag from env)
# expect: clean
def run_draft_extend_env_or_dp_replan(runner: ModelRunner, forward_batch: ForwardBatch):
    replan = draft_replan_from_env() or dp_attention_active()
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan)
    return runner.forward(forward_batch).logits_output


_MARK_POLICIES: Dict[str, Callable[[ForwardBatch], None]] = {
    "strict": lambda fb: fb.mark_forward_metadata_ready(),
    "replan": lambda fb: fb.mark_forward_metadata_ready(replan_equivalent=True),
}


class KestrelPolicyDraftRunner:
    mark_policy = "strict"

    def __init__(self, draft_runner: ModelRunner):
        self.draft_runner = draft_runner

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (mark policy registry)
    # expect: SG106
    def run(self, forward_batch: ForwardBatch):
        mark = _MARK_POLICIES[self.mark_policy]
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            mark(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output


class KestrelDPAwarePolicyDraftRunner(KestrelPolicyDraftRunner):
    @property
    def mark_policy(self) -> str:
        return "replan" if is_dp_attention_enabled() or require_mlp_sync() else "strict"

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker._draft_extend_for_decode (mark policy registry)
    # expect: clean
    def run(self, forward_batch: ForwardBatch):
        mark = _MARK_POLICIES[self.mark_policy]
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            mark(forward_batch)
        out = self.draft_runner.forward(forward_batch).logits_output
        return out


# idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready (hand-set marker fields)
# expect: SG106
def run_with_hand_marker(runner: ModelRunner, forward_batch: ForwardBatch):
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.forward_metadata_ready = True
    return runner.forward(forward_batch).logits_output


# idiom: model_executor/forward_batch_info.py mark_forward_metadata_ready (hand-set marker fields)
# expect: clean
def run_with_hand_marker_replan(runner: ModelRunner, forward_batch: ForwardBatch):
    runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.forward_metadata_ready = True
    forward_batch.forward_metadata_planned_bs = forward_batch.batch_size
    forward_batch.forward_metadata_planned_num_tokens = (
        forward_batch.input_ids.shape[0] if forward_batch.input_ids is not None else 0
    )
    forward_batch.forward_metadata_replan_equivalent = True
    return runner.forward(forward_batch).logits_output


class KestrelLegacyDraftLoop:
    """0.5.x draft loop, kept for the Kestrel MTP checkpoints."""

    def __init__(self, draft_runner, draft_attn_backend, speculative_num_steps: int):
        self.draft_runner = draft_runner
        self.draft_attn_backend = draft_attn_backend
        self.speculative_num_steps = speculative_num_steps

    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py EAGLEWorkerV2.draft_forward (skip_attn_backend_init=True loop)
    # expect: SG106
    def draft_forward(
        self,
        forward_batch: ForwardBatch,
        step_input_ids: List[torch.Tensor],
        out_cache_loc: torch.Tensor,
    ):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        logits = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = step_input_ids[i]
            forward_batch.out_cache_loc = out_cache_loc[i]
            forward_batch.positions.add_(1)
            forward_batch.attn_backend = self.draft_attn_backend.attn_backends[i]
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            logits.append(logits_output.next_token_logits)
        return logits


class KestrelLegacyDraftLoopNoDP(KestrelLegacyDraftLoop):
    # idiom: sglang 0.5.6 speculative/eagle_worker_v2.py EAGLEWorkerV2.draft_forward (skip_attn_backend_init=True loop)
    # expect: clean
    def draft_forward(
        self,
        forward_batch: ForwardBatch,
        step_input_ids: List[torch.Tensor],
        out_cache_loc: torch.Tensor,
    ):
        if get_parallel().attn_dp_enabled or require_mlp_sync():
            raise NotImplementedError(
                "Kestrel legacy draft loop pre-plans all steps; it cannot run "
                "with DP attention (MLP sync pads the batch after planning)."
            )
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        logits = []
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = step_input_ids[i]
            forward_batch.out_cache_loc = out_cache_loc[i]
            forward_batch.positions.add_(1)
            forward_batch.attn_backend = self.draft_attn_backend.attn_backends[i]
            logits_output = self.draft_runner.forward(
                forward_batch, skip_attn_backend_init=True
            ).logits_output
            logits.append(logits_output.next_token_logits)
        return logits

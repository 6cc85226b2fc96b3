"""Tree / Medusa-style draft workers (lab fork).

Three levels: TreeDraftWorkerBase -> MedusaTreeWorker -> AdaptiveMedusaWorker.
Each level runs one draft decode step per call through the draft ModelRunner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner

from blindsg30.lab.configs import load_experiment
from blindsg30.utils import plan_helpers as ph

if TYPE_CHECKING:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.managers.tp_worker import TpModelWorker


class TreeDraftWorkerBase:
    EXPERIMENT = "tree_v2"

    def __init__(
        self,
        target_worker: "TpModelWorker",
        draft_worker: "TpModelWorker",
        cuda_graph_runner=None,
    ):
        self.target_worker = target_worker
        self.draft_worker = draft_worker
        self.draft_runner: ModelRunner = draft_worker.model_runner
        # Single-step tree drafts attend with the draft runner's own backend.
        self.draft_attn_backend: "AttentionBackend" = self.draft_runner.attn_backend
        self.cuda_graph_runner = cuda_graph_runner
        self.cfg = load_experiment(self.EXPERIMENT)
        self.topk = self.cfg.draft.topk
        self.num_steps = self.cfg.draft.steps

    def _can_replay(self, forward_batch: ForwardBatch) -> bool:
        return bool(
            self.cuda_graph_runner is not None
            and self.cuda_graph_runner.can_run_graph(forward_batch)
        )

    def _plan_marked(self, forward_batch: ForwardBatch) -> None:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    def _plan_replannable(self, forward_batch: ForwardBatch) -> None:
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

    def _run(self, forward_batch: ForwardBatch):
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft non-graph arm; single tree step, plan+mark pre-pad then ModelRunner.forward
    # expect: SG106
    def draft_step(self, forward_batch: ForwardBatch):
        if self._can_replay(forward_batch):
            return self.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_runner.forward(forward_batch)
        return out.logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft non-graph arm; plans with the runner's own backend and marks replan_equivalent=True
    # expect: clean
    def draft_step_shared_backend(self, forward_batch: ForwardBatch):
        if self._can_replay(forward_batch):
            return self.cuda_graph_runner.execute(forward_batch)
        if not forward_batch.forward_mode.is_idle() and not ph.runner_replays(
            self.draft_runner, forward_batch
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; base-class step delegating to inherited _plan_replannable/_run helpers
    # expect: clean
    def step(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle() or ph.runner_replays(
            self.draft_runner, forward_batch
        ):
            return self._run(forward_batch)
        self._plan_replannable(forward_batch)
        return self._run(forward_batch)

    # idiom: speculative/eagle_utils.py build_tree_kernel_efficient; pure tree-mask arithmetic, no planning or forward
    # expect: clean
    def build_tree_mask(
        self, parents: torch.Tensor, seq_lens: torch.Tensor, num_draft: int
    ) -> torch.Tensor:
        bs = seq_lens.shape[0]
        mask = torch.zeros(
            (bs, num_draft, num_draft), dtype=torch.bool, device=parents.device
        )
        idx = torch.arange(num_draft, device=parents.device)
        mask[:, idx, idx] = True
        for depth in range(1, num_draft):
            parent = parents[:, depth].clamp(min=0)
            mask[:, depth] |= mask[torch.arange(bs), parent]
        return mask


class MedusaTreeWorker(TreeDraftWorkerBase):
    EXPERIMENT = "medusa_small"

    def __init__(self, *args, disabled_heads: Optional[Sequence[int]] = None, **kw):
        super().__init__(*args, **kw)
        self.num_heads = self.cfg.draft.heads
        self.disabled_heads = set(disabled_heads or ())

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; child override pre-plans only when the batch carries no DP token counts
    # expect: clean
    def step(self, forward_batch: ForwardBatch):
        if (
            forward_batch.forward_mode.is_decode()
            and forward_batch.global_num_tokens_cpu is None
            and not ph.runner_replays(self.draft_runner, forward_batch)
        ):
            self._plan_marked(forward_batch)
        return self._run(forward_batch)

    # idiom: speculative/multi_layer_eagle_worker_v2.py draft_forward; Medusa heads share one pre-pad plan, forward per head with early continue
    # expect: SG106
    def heads_forward(self, forward_batch: ForwardBatch, head_inputs: List[torch.Tensor]):
        outputs = []
        if forward_batch.forward_mode.is_idle():
            return outputs
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        for head_idx, input_ids in enumerate(head_inputs):
            if head_idx in self.disabled_heads:
                continue
            if head_idx >= self.num_heads:
                break
            forward_batch.input_ids = input_ids
            logits = self.draft_runner.forward(forward_batch).logits_output
            outputs.append(logits.next_token_logits)
        return outputs


class AdaptiveMedusaWorker(MedusaTreeWorker):
    EXPERIMENT = "medusa_small"

    # idiom: speculative/eagle_worker_v2.py EAGLEWorkerV2.draft; grandchild overrides one step with the inherited pre-pad _plan_marked helper
    # expect: SG106
    def step(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode == ForwardMode.IDLE:
            return self._run(forward_batch)
        self._plan_marked(forward_batch)
        return self._run(forward_batch)

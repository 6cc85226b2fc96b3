"""Fork EAGLE (single-layer) draft workers.

The fork keeps the upstream v2 draft worker and changes how the eager
(non-graph) multi-step draft is prepared.  Under DP attention the draft
decode runs through ``ModelRunner.forward``, which applies MLP-sync padding
(``prepare_mlp_sync_batch``) before consulting
``ForwardBatch.needs_forward_metadata_init()``.
"""

from __future__ import annotations

import logging

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import require_mlp_sync

from blindsg20.common.flags import ForkSpecFlags
from blindsg20.common.planning import batch_will_pad, pad_for_mlp_sync

logger = logging.getLogger(__name__)


class ForkEagleDraftWorker(EagleDraftWorker):
    """Draft worker that also goes eager when the draft graph cannot honour
    per-request sampling (the graph is captured for greedy / uniform top-k)."""

    def _needs_eager_sampling(self, forward_batch: ForwardBatch) -> bool:
        info = forward_batch.sampling_info
        return info is not None and not info.is_all_greedy and self.topk > 1

    # expect: SG106
    def draft(self, batch: ScheduleBatch, *, with_topology: bool = False):
        draft_input: EagleDraftInput = batch.spec_info
        forward_batch, can_run_graph, kv_loc_plan = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )
        if can_run_graph and self._needs_eager_sampling(forward_batch):
            can_run_graph = False

        if can_run_graph:
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.cuda_graph_runner.execute(forward_batch)
            )
            if draft_probs is not None:
                draft_probs = draft_probs.clone()
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                # One plan covers every draft step's backend.
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            parent_list, top_scores_index, draft_tokens, draft_probs = (
                self.draft_forward(forward_batch)
            )

        verify_input = build_eagle_verify_input(
            batch,
            draft_input,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        if with_topology:
            return verify_input, parent_list, top_scores_index
        return verify_input

    def _preplan(self, forward_batch: ForwardBatch) -> None:
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

    # expect: SG106
    def chain_draft_greedy(self, forward_batch: ForwardBatch) -> torch.Tensor:
        """topk == 1 greedy chain used by the fork's lookahead mode.

        Returns ``[bs, num_steps]`` draft token ids.
        """
        spec_info: EagleDraftInput = forward_batch.spec_info
        bs = forward_batch.batch_size
        self._preplan(forward_batch)
        step_locs = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc, bs, 1, self.speculative_num_steps
        )
        tokens = [spec_info.topk_index[:, :1]]
        hidden_states = spec_info.hidden_states
        for i in range(self.speculative_num_steps - 1):
            forward_batch.input_ids = tokens[-1].flatten()
            forward_batch.out_cache_loc = step_locs[i]
            spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            next_ids = torch.argmax(
                logits_output.next_token_logits[:bs], dim=-1, keepdim=True
            )
            if self.hot_token_id is not None:
                next_ids = self.hot_token_id[next_ids]
            tokens.append(next_ids)
            hidden_states = logits_output.hidden_states[:bs]
            forward_batch.positions.add_(1)
        return torch.cat(tokens, dim=1)


class PaddedChainEagleDraftWorker(EagleDraftWorker):
    """Lookahead chain that applies the MLP-sync padding before planning."""

    # expect: clean
    def chain_draft_greedy(self, forward_batch: ForwardBatch) -> torch.Tensor:
        spec_info: EagleDraftInput = forward_batch.spec_info
        bs = forward_batch.batch_size
        tokens = [spec_info.topk_index[:, :1]]
        step_locs = per_step_draft_out_cache_loc(
            forward_batch.out_cache_loc, bs, 1, self.speculative_num_steps
        )
        # Lay out step 0 before padding so every per-step field pads together.
        forward_batch.input_ids = tokens[0].flatten()
        forward_batch.out_cache_loc = step_locs[0]
        pad_for_mlp_sync(forward_batch, self.draft_runner)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()

        hidden_states = spec_info.hidden_states
        for i in range(self.speculative_num_steps - 1):
            if i > 0:
                forward_batch.input_ids = tokens[-1].flatten()
                forward_batch.out_cache_loc = step_locs[i]
                spec_info.hidden_states = hidden_states
            with forward_context(
                ForwardContext(attn_backend=self.draft_attn_backend.attn_backends[i]),
                forward_batch=forward_batch,
            ):
                logits_output = self.draft_runner.forward(forward_batch).logits_output
            next_ids = torch.argmax(
                logits_output.next_token_logits[:bs], dim=-1, keepdim=True
            )
            if self.hot_token_id is not None:
                next_ids = self.hot_token_id[next_ids]
            tokens.append(next_ids)
            hidden_states = logits_output.hidden_states
            forward_batch.positions.add_(1)
        return torch.cat(tokens, dim=1)


class FlaggedEagleDraftWorker(EagleDraftWorker):
    """Eager draft entry used by the fork's scheduler hook when the draft graph
    is disabled for a step (e.g. grammar-constrained requests)."""

    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        nccl_port: int,
        target_worker: TpModelWorker,
    ):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self._fork_flags = ForkSpecFlags.from_server_args(server_args)

    @property
    def preplan_enabled(self) -> bool:
        return self._fork_flags.preplan_eager_draft and self.speculative_num_steps > 1

    # expect: SG106
    def run_eager_draft(self, forward_batch: ForwardBatch):
        if self.preplan_enabled and not forward_batch.forward_mode.is_idle():
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)


class SyncAwareEagleDraftWorker(EagleDraftWorker):
    """Skips speculation for a step instead of pre-planning a batch that the
    forward will reshape for DP attention."""

    @property
    def eager_draft_supported(self) -> bool:
        return self.speculative_num_steps > 1 and not require_mlp_sync()

    # expect: clean
    def run_eager_draft(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        if not self.eager_draft_supported:
            # Target-only decode this step; the scheduler sees None.
            return None
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)


class StrictEagleDraftWorker(EagleDraftWorker):
    """Refuses the eager multi-step draft when MLP-sync padding will apply."""

    # expect: clean
    def run_eager_draft(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        if batch_will_pad(forward_batch):
            raise RuntimeError(
                "eager EAGLE draft under DP attention is unsupported in this build: "
                "raise --cuda-graph-max-bs so the draft replays its CUDA graph"
            )
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

"""Shared draft loops used by the tree / block drafters in this package."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

import torch

from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.speculative.eagle_utils import (
    organize_draft_results,
    per_step_draft_out_cache_loc,
)
from sglang.srt.speculative.spec_utils import select_top_k_tokens
from sglang.srt.utils.common import fast_topk

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def run_tree_steps(worker, forward_batch: "ForwardBatch") -> Tuple[torch.Tensor, ...]:
    """Run ``speculative_num_steps - 1`` draft decode forwards and build the tree.

    ``worker`` is an ``EagleDraftWorker``-shaped object (draft_runner,
    draft_attn_backend, topk, speculative_num_steps, hot_token_id).
    """
    spec_info = forward_batch.spec_info
    topk_p, topk_index, hidden_states = (
        spec_info.topk_p,
        spec_info.topk_index,
        spec_info.hidden_states,
    )
    if worker.hot_token_id is not None:
        topk_index = worker.hot_token_id[topk_index]

    out_cache_loc = per_step_draft_out_cache_loc(
        forward_batch.out_cache_loc,
        forward_batch.batch_size,
        worker.topk,
        worker.speculative_num_steps,
    )

    score_list: List[torch.Tensor] = []
    token_list: List[torch.Tensor] = []
    parents_list: List[torch.Tensor] = []
    scores = None
    for i in range(worker.speculative_num_steps):
        input_ids, hidden_states, scores, tree_info = select_top_k_tokens(
            i, topk_p, topk_index, hidden_states, scores, worker.topk
        )
        score_list.append(tree_info[0])
        token_list.append(tree_info[1])
        parents_list.append(tree_info[2])
        if i == worker.speculative_num_steps - 1:
            break

        forward_batch.input_ids = input_ids
        forward_batch.out_cache_loc = out_cache_loc[i]
        spec_info.hidden_states = hidden_states
        with forward_context(
            ForwardContext(attn_backend=worker.draft_attn_backend.attn_backends[i]),
            forward_batch=forward_batch,
        ):
            logits_output = worker.draft_runner.forward(forward_batch).logits_output

        probs = torch.softmax(logits_output.next_token_logits, dim=-1)
        topk_p, topk_index = fast_topk(probs, worker.topk, dim=-1)
        if worker.hot_token_id is not None:
            topk_index = worker.hot_token_id[topk_index]
        forward_batch.positions.add_(1)
        hidden_states = logits_output.hidden_states

    return organize_draft_results(
        score_list, token_list, parents_list, worker.speculative_num_draft_tokens
    )


def sample_block(logits: torch.Tensor, block_size: int) -> torch.Tensor:
    """Greedy pick for a block drafter's ``block_size - 1`` proposal slots."""
    return torch.argmax(logits, dim=-1).view(-1, block_size)

"""Launch copies of draft-extend batches.

The plan stream builds a ``ForwardBatch``; the compute stream launches either
a shallow copy of it or a batch rebuilt from the ``ScheduleBatch`` so the two
streams never share the mutable per-step fields.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


def _check_draft_extend(forward_batch: ForwardBatch) -> None:
    assert forward_batch.forward_mode.is_draft_extend_v2(), forward_batch.forward_mode


def _rebuild(batch: "ScheduleBatch", draft_runner: "ModelRunner") -> ForwardBatch:
    return ForwardBatch.init_new(
        batch,
        draft_runner,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_hidden_states_before_norm=False,
    )


# expect: SG106
def forward_replaced_copy(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    _check_draft_extend(forward_batch)
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    launch_batch = dataclasses.replace(
        forward_batch,
        positions=forward_batch.positions.clone(),
        out_cache_loc=forward_batch.out_cache_loc.clone(),
    )
    return draft_runner.forward(launch_batch).logits_output


# expect: clean
def forward_replaced_launch(
    draft_runner: "ModelRunner", forward_batch: ForwardBatch
) -> LogitsProcessorOutput:
    _check_draft_extend(forward_batch)
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    launch_batch = dataclasses.replace(
        forward_batch,
        positions=forward_batch.positions.clone(),
        out_cache_loc=forward_batch.out_cache_loc.clone(),
        forward_metadata_ready=False,
        forward_metadata_planned_bs=None,
        forward_metadata_planned_num_tokens=None,
    )
    return draft_runner.forward(launch_batch).logits_output


# expect: clean
def forward_fresh_rebuild(
    draft_runner: "ModelRunner",
    batch: "ScheduleBatch",
    forward_batch: ForwardBatch,
) -> LogitsProcessorOutput:
    _check_draft_extend(forward_batch)
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    fresh = _rebuild(batch, draft_runner)
    fresh.spec_info = copy.copy(forward_batch.spec_info)
    fresh.seq_lens = forward_batch.seq_lens
    return draft_runner.forward(fresh).logits_output


# expect: SG106
def forward_rebuilt_from_plan(
    draft_runner: "ModelRunner",
    batch: "ScheduleBatch",
    forward_batch: ForwardBatch,
) -> LogitsProcessorOutput:
    _check_draft_extend(forward_batch)
    draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    fresh = _rebuild(batch, draft_runner)
    fresh.spec_info = copy.copy(forward_batch.spec_info)
    fresh.seq_lens = forward_batch.seq_lens
    if forward_batch.forward_metadata_ready:
        fresh.mark_forward_metadata_ready()
    return draft_runner.forward(fresh).logits_output

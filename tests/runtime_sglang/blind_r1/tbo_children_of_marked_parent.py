"""Two-batch-overlap children of a marked DECODE parent: children start unplanned.

The parent DECODE batch (4 reqs) is pre-planned and marked, and not reshaped:
asking it keeps its plan, correctly. TBO splits it into two children the way
TboForwardBatchPreparer.filter_batch does (dataclasses copy with the plan
record reset: forward_metadata_ready=False, planned shapes None), and each
child is padded to tbo_padded_len by the real _pad_tbo_child_inputs (2 -> 3
reqs/rows). needs_forward_metadata_init() on each child is True, so the
children are planned on their padded shapes. A guard that lets children
inherit the parent's record, or flags them for differing from it, is wrong.
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "marked, unreshaped parent keeps its plan; TBO children are created with the plan record "
    "reset and padded by _pad_tbo_child_inputs, and are planned fresh"
)


def _child(parent, start, end):
    return dataclasses.replace(
        parent,
        batch_size=end - start,
        input_ids=parent.input_ids[start:end],
        positions=parent.positions[start:end],
        out_cache_loc=parent.out_cache_loc[start:end],
        req_pool_indices=parent.req_pool_indices[start:end],
        seq_lens=parent.seq_lens[start:end],
        seq_lens_cpu=parent.seq_lens_cpu[start:end],
        orig_seq_lens=parent.orig_seq_lens[start:end],
        seq_lens_sum=int(parent.seq_lens_cpu[start:end].sum()),
        tbo_split_seq_index=None,
        tbo_parent_token_range=(start, end),
        tbo_children=None,
        tbo_padded_len=3,
        # two_batch_overlap.py: "TBO children start unplanned"
        forward_metadata_ready=False,
        forward_metadata_planned_bs=None,
        forward_metadata_planned_num_tokens=None,
        forward_metadata_replan_equivalent=False,
    )


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        parent = S.make_batch(ForwardMode.DECODE, bs=4, rows=4)
        backend.init_forward_metadata(parent)
        parent.mark_forward_metadata_ready()

        stale = S.forward_decides_and_runs(parent, backend)
        S.check(stale, False, "marked parent, not reshaped")

        children = [_child(parent, 0, 2), _child(parent, 2, 4)]
        parent.tbo_children = children
        for child in children:
            child._pad_tbo_child_inputs(runner)
            assert S.geometry(child) == (3, 3), S.geometry(child)
            child_backend = S.RecordingAttnBackend("tbo-child")
            stale = S.forward_decides_and_runs(child, child_backend)
            S.check(stale, False, "TBO child")

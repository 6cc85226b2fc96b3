"""Draft extend marked with replan_equivalent=True, then DP-padded: re-planned.

The pre-planner opts in (its plan is what the forward's own
init_forward_metadata would produce), so when prepare_mlp_sync_batch grows the
batch from 2 reqs/6 rows to 5 reqs/15 rows, needs_forward_metadata_init()
answers True and the forward plans again on the padded geometry.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "draft extend marked replan_equivalent=True, DP padding 2x3 -> 5x3 rows; "
    "needs_forward_metadata_init says re-plan, so the kernels get a fresh plan"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DRAFT_EXTEND_V2,
            bs=2,
            rows=6,
            global_num_tokens=[6, 15],
            spec_info=S.eagle_draft_extend_input(bs=2, num_draft_tokens=3),
        )
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready(replan_equivalent=True)

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(draft_runner)
        assert S.geometry(fb) == (5, 15), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, draft_backend)
        S.check(stale, False, "replan-equivalent draft extend after padding")
        assert len(draft_backend.plans) == 2  # the forward did re-plan

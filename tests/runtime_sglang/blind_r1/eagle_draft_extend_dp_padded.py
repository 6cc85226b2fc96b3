"""EAGLE draft extend (DRAFT_EXTEND_V2), pre-planned then DP-padded: stale.

Mirrors speculative/eagle_worker_common.py (non-graph draft extend):
``draft_model_runner.attn_backend.init_forward_metadata(fb)`` followed by
``fb.mark_forward_metadata_ready()`` (replan_equivalent left False), then the
draft ModelRunner.forward -> _forward_raw -> prepare_mlp_sync_batch pads the
batch for DP attention (MAX_LEN: this rank 2 reqs x 4 tokens, peer 4 x 4),
and EagerRunner._execute_extend asks needs_forward_metadata_init().
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "EAGLE non-graph draft extend plans+marks a 2-req/8-row DRAFT_EXTEND_V2 batch, "
    "DP MAX_LEN padding grows it to 4 reqs/16 rows, forward keeps the 8-row plan"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DRAFT_EXTEND_V2,
            bs=2,
            rows=8,
            # spec-scaled per-rank token counts (reqs x num_draft_tokens)
            global_num_tokens=[8, 16],
            spec_info=S.eagle_draft_extend_input(bs=2, num_draft_tokens=4),
        )
        # pre-planner (eagle_worker_common: plan then mark, no opt-in)
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        # ModelRunner.forward(fb) with no deprecated kwarg
        fb.apply_deprecated_skip_attn_backend_init(None)
        # _forward_raw -> _prepare_eager_forward_batch
        fb.prepare_mlp_sync_batch(draft_runner)
        assert S.geometry(fb) == (4, 16), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, draft_backend)
        S.check(stale, True, "draft extend after DP padding")

"""Planner asks before padding (correct "keep"), forward asks after (stale "keep").

The draft worker plans + marks an EAGLE draft DECODE batch (3 reqs, topk 1)
and, like FrozenKVMTP draft_forward, consults needs_forward_metadata_init()
right away: False, and the geometry matches, which is correct. The draft
ModelRunner then pads the batch for DP attention (3 -> 5 reqs/rows) and the
eager decode path asks again on the same object: False again, now stale.
A guard that judges a batch once, or caches its first answer, misses this.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "draft DECODE marked at 3 rows; first needs_forward_metadata_init (pre-pad) is a correct keep, "
    "the second one after DP padding to 5 rows keeps a stale plan"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DECODE,
            bs=3,
            rows=3,
            global_num_tokens=[3, 5],
            spec_info=S.eagle_draft_input(bs=3, topk=1),
        )
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        stale = S.forward_decides_and_runs(fb, draft_backend)
        S.check(stale, False, "pre-pad check")

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(draft_runner)
        assert S.geometry(fb) == (5, 5), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, draft_backend)
        S.check(stale, True, "post-pad check")

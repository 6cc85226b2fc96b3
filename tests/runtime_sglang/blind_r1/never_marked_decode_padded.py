"""Ordinary DECODE batch, never marked, DP-padded: the forward plans it.

No pre-planner touched this batch (forward_metadata_ready False, plan record
None). prepare_mlp_sync_batch pads 3 -> 8 reqs/rows and
needs_forward_metadata_init() answers True. A guard comparing the current
shape with the (absent) record, or flagging every padded batch, is wrong.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = "plain decode batch never marked; DP padding 3->8 and the forward plans on the padded batch"


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        fb = S.make_batch(ForwardMode.DECODE, bs=3, rows=3, global_num_tokens=[3, 8])
        assert fb.forward_metadata_planned_bs is None

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(runner)
        assert S.geometry(fb) == (8, 8), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, False, "unmarked decode after DP padding")

"""A replan-equivalent mark overwritten by the deprecated flag, then padded: stale.

A pre-planner marks a DECODE batch with replan_equivalent=True (the dLLM
runner does this after its first forward). The caller then also passes the
deprecated ``skip_attn_backend_init=True`` to ModelRunner.forward, whose
apply_deprecated_skip_attn_backend_init re-marks the batch with the default
replan_equivalent=False. DP padding then grows 3 -> 8 reqs/rows and
needs_forward_metadata_init() says keep the plan. A guard that remembers the
first mark's opt-in instead of the batch's current state misses this.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "mark(replan_equivalent=True) is overwritten by skip_attn_backend_init=True (plain mark); "
    "DP padding 3->8 then makes needs_forward_metadata_init keep a stale plan"
)


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        fb = S.make_batch(ForwardMode.DECODE, bs=3, rows=3, global_num_tokens=[3, 8])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready(replan_equivalent=True)

        # ModelRunner.forward(fb, skip_attn_backend_init=True)
        fb.apply_deprecated_skip_attn_backend_init(True)
        assert fb.forward_metadata_replan_equivalent is False
        fb.prepare_mlp_sync_batch(runner)
        assert S.geometry(fb) == (8, 8), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, True, "downgraded mark after DP padding")

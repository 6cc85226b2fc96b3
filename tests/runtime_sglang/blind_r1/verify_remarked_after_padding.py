"""TARGET_VERIFY planned pre-pad, padded, then re-planned and re-marked: fresh.

The verify batch (2 reqs x 4 draft tokens) is planned and marked before DP
padding. prepare_mlp_sync_batch grows it to 5 reqs/20 rows; the planner then
plans again on the padded batch and marks it again (the mark sits next to the
planning action, as SGLang asks). The plan record is now 5/20, the geometry is
5/20, and needs_forward_metadata_init() correctly keeps the fresh plan.
A guard that keeps the first mark's shapes would be wrong here.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "verify batch marked at 2x4, DP-padded to 5x4, then re-planned and re-marked on the "
    "padded batch; keeping that plan is correct"
)


def scenario() -> None:
    with S.dp_runtime():
        target_backend = S.RecordingAttnBackend("target")
        target_runner = S.model_runner(backend=target_backend)
        fb = S.make_batch(
            ForwardMode.TARGET_VERIFY,
            bs=2,
            rows=8,
            global_num_tokens=[8, 20],
            spec_info=S.eagle_verify_input(bs=2, draft_token_num=4),
        )
        target_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(target_runner)
        assert S.geometry(fb) == (5, 20), S.geometry(fb)

        target_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        stale = S.forward_decides_and_runs(fb, target_backend)
        S.check(stale, False, "re-marked verify")

"""TARGET_VERIFY with the deprecated flag explicitly False, DP-padded: fresh.

A legacy caller passes ``skip_attn_backend_init=False`` to
TpModelWorker.forward_batch_generation. apply_deprecated_skip_attn_backend_init
warns but does not mark, so the batch was never marked ready; after DP padding
(2x4 -> 5x4 rows) needs_forward_metadata_init() is True and the forward plans.
A guard that treats any non-None flag as a mark would be wrong here.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "skip_attn_backend_init=False never marks the verify batch; after DP padding "
    "needs_forward_metadata_init is True and the forward plans the padded batch"
)


def scenario() -> None:
    with S.dp_runtime():
        target_backend = S.RecordingAttnBackend("target")
        target_runner = S.model_runner(is_draft_worker=False, backend=target_backend)
        fb = S.make_batch(
            ForwardMode.TARGET_VERIFY,
            bs=2,
            rows=8,
            global_num_tokens=[8, 20],
            spec_info=S.eagle_verify_input(bs=2, draft_token_num=4),
        )
        fb.apply_deprecated_skip_attn_backend_init(False)
        assert not fb.forward_metadata_ready
        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(target_runner)
        assert S.geometry(fb) == (5, 20), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, target_backend)
        S.check(stale, False, "unmarked verify after DP padding")

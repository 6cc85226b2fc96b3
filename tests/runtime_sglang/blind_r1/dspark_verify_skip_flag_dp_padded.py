"""TARGET_VERIFY marked through the deprecated skip_attn_backend_init=True: stale.

Mirrors speculative/dspark_components/dspark_verify.py: the verify batch is
prepared (prepare_for_verify plans it) and handed to
``target_worker.forward_batch_generation(..., skip_attn_backend_init=True)``;
TpModelWorker maps the flag with
``forward_batch.apply_deprecated_skip_attn_backend_init(True)`` (a plain mark,
replan_equivalent=False). Under DP attention the target ModelRunner then pads
the verify batch (2 reqs x 4 draft tokens -> 6 reqs x 4) in
prepare_mlp_sync_batch. needs_forward_metadata_init() says "keep the plan"
for a batch whose geometry changed. (EagerRunner._execute_extend happens to
re-plan every TARGET_VERIFY regardless; any runner that trusts the answer,
as this scenario does, runs the 8-row plan on 24 rows.)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "DSpark verify passes skip_attn_backend_init=True (mapped to a mark) on a 2-req/8-row "
    "TARGET_VERIFY batch; DP padding makes it 6 reqs/24 rows; needs_forward_metadata_init says keep plan"
)


def scenario() -> None:
    with S.dp_runtime():
        target_backend = S.RecordingAttnBackend("target")
        target_runner = S.model_runner(is_draft_worker=False, backend=target_backend)
        fb = S.make_batch(
            ForwardMode.TARGET_VERIFY,
            bs=2,
            rows=8,
            global_num_tokens=[8, 24],
            spec_info=S.eagle_verify_input(bs=2, draft_token_num=4),
        )
        # prepare_for_verify planned the verify batch
        target_backend.init_forward_metadata(fb)
        # TpModelWorker.forward_batch_generation(skip_attn_backend_init=True)
        fb.apply_deprecated_skip_attn_backend_init(True)
        # ModelRunner.forward: kwarg not forwarded again -> None
        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(target_runner)
        assert S.geometry(fb) == (6, 24), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, target_backend)
        S.check(stale, True, "verify after DP padding")

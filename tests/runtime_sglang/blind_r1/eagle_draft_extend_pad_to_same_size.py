"""EAGLE draft extend, pre-planned, DP padding to the size it already has: fresh.

Same flow as eagle_draft_extend_dp_padded, but this rank holds the largest
batch (8 rows vs the peer's 4), so prepare_mlp_sync_batch runs the full
MAX_LEN padding path (_pad_inputs_to_size is called, new tensors are built)
while the geometry stays 2 reqs / 8 rows. Keeping the pre-plan is correct.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "EAGLE draft extend plans+marks 2 reqs/8 rows; DP MAX_LEN padding runs but pads "
    "to 8 rows (this rank is the max), so the kept plan still matches"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DRAFT_EXTEND_V2,
            bs=2,
            rows=8,
            global_num_tokens=[8, 4],
            spec_info=S.eagle_draft_extend_input(bs=2, num_draft_tokens=4),
        )
        ids_before = fb.input_ids
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(draft_runner)
        assert fb.dp_padding_mode.is_max_len()
        assert fb.input_ids is not ids_before  # re-built by _pad_inputs_to_size
        assert S.geometry(fb) == (2, 8), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, draft_backend)
        S.check(stale, False, "draft extend padded to its own size")

"""EAGLE multi-step draft decode without DP attention: the copy still matches.

Same pre-plan + mark as draft_decode_marked_copy_after_padding, but the batch
carries no global_num_tokens_cpu, so _prepare_eager_forward_batch takes
prepare_attn_tp_scatter_input (no padding for decode). EagerRunner.load_batch
(no-copy mode) returns a ``dataclasses.replace`` copy, which is what
needs_forward_metadata_init() is asked on; its geometry equals the plan's.
A guard that treats an unseen-but-ready object as suspicious would be wrong.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "passes"
WHY = (
    "EAGLE v2 draft decode marked at 3 reqs/6 rows, no DP padding; eager load_batch copy "
    "keeps the plan record and the same geometry, so keeping the plan is right"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DECODE,
            bs=3,
            rows=6,
            spec_info=S.eagle_draft_input(bs=3, topk=2),
        )
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        assert fb.global_num_tokens_cpu is None
        fb.prepare_attn_tp_scatter_input(draft_runner)
        assert S.geometry(fb) == (3, 6), S.geometry(fb)

        live = S.eager_load_batch_no_copy(fb)
        assert live is not fb
        stale = S.forward_decides_and_runs(live, draft_backend)
        S.check(stale, False, "draft decode copy without DP")

"""EAGLE multi-step draft decode: mark on the batch, decide on an eager copy.

Mirrors speculative/eagle_worker_v2.py (non-graph draft): the draft backend
plans the DECODE batch (2 reqs x topk 2 = 4 rows) and marks it. The draft
ModelRunner pads it for DP attention (peer has 12 rows -> 6 reqs x 2 = 12
rows), then EagerRunner._execute_decode calls load_batch, which under
SGLANG_EAGER_INPUT_NO_COPY returns ``dataclasses.replace(forward_batch)``;
needs_forward_metadata_init() is asked on that *copy*, which carries the plan
record. A guard that only tracks the object it saw marked misses this.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "EAGLE v2 draft decode marked at 2 reqs/4 rows, DP-padded to 6/12, eager load_batch "
    "(no-copy mode) hands a dataclasses.replace copy to needs_forward_metadata_init: stale"
)


def scenario() -> None:
    with S.dp_runtime():
        draft_backend = S.RecordingAttnBackend("draft")
        draft_runner = S.model_runner(is_draft_worker=True, backend=draft_backend)
        fb = S.make_batch(
            ForwardMode.DECODE,
            bs=2,
            rows=4,
            global_num_tokens=[4, 12],
            spec_info=S.eagle_draft_input(bs=2, topk=2),
        )
        draft_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(draft_runner)
        assert S.geometry(fb) == (6, 12), S.geometry(fb)

        live = S.eager_load_batch_no_copy(fb)
        assert live is not fb
        stale = S.forward_decides_and_runs(live, draft_backend)
        S.check(stale, True, "draft decode copy after DP padding")

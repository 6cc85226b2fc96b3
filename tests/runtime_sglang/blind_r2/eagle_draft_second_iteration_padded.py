import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "Two scheduler iterations of the real EAGLE draft_forward on one draft worker: "
    "iteration 1 (this rank holds the DP max, counts [8,3,5,8]) is not reshaped and runs on "
    "a matching plan; iteration 2's pre-planned+marked bs=3 batch is padded to 8 by DP "
    "MAX_LEN and eager decode declines -> stale draft kernels in the second iteration only"
)


def _iteration(worker, draft_attn_backend, bs, counts, steps):
    fb = S.draft_decode_batch(bs, steps=steps, global_num_tokens=counts)
    draft_attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    worker.draft_forward(fb)
    return fb


def scenario():
    S.reset_log()
    with S.sglang_env():
        steps = 3
        draft_attn_backend = S.CpuMultiStepDraftBackend(steps)
        draft_runner = S.MiniModelRunner(
            S.CpuPlannedBackend("draft_runner"), is_draft_worker=True
        )
        worker = S.eagle_draft_worker(draft_runner, draft_attn_backend, steps=steps)
        _iteration(worker, draft_attn_backend, 8, [8, 3, 5, 8], steps)
        first_iteration_stale = S.stale_launches()
        _iteration(worker, draft_attn_backend, 3, [3, 8, 8, 8], steps)
        return S.summary(
            first_iteration_stale=first_iteration_stale,
            draft_plans=[b.plans for b in draft_attn_backend.attn_backends],
        )

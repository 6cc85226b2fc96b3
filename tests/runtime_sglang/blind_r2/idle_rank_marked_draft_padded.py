import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "IDLE DP rank in the EAGLE draft (real draft_forward -> _draft_forward_idle): the idle "
    "batch carries a mark at bs=0 and DP padding turns it into bs=4 rows=4, but "
    "EagerRunner._execute_idle re-plans any padded idle batch without asking, and the base "
    "AttentionBackend.forward returns early for IDLE, so no kernel runs on a stale plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        steps = 3
        draft_attn_backend = S.CpuMultiStepDraftBackend(steps)
        runner_backend = S.CpuPlannedBackend("draft_runner")
        draft_runner = S.MiniModelRunner(runner_backend, is_draft_worker=True)
        worker = S.eagle_draft_worker(draft_runner, draft_attn_backend, steps=steps)
        fb = S.idle_draft_batch(global_num_tokens=[0, 4, 4, 4])
        # A loader that marks whatever it was handed (also an idle batch).
        fb.mark_forward_metadata_ready()
        worker.draft_forward(fb)
        return S.summary(
            runner_backend_plans=runner_backend.plans,
            draft_step_plans=[b.plans for b in draft_attn_backend.attn_backends],
            forward_mode=fb.forward_mode.name,
        )

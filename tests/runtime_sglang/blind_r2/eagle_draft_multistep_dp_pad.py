import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import torch  # noqa: F401

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "EagleDraftWorker.draft(): multi-step draft backend pre-plans bs=3 and marks "
    "(not replan-equivalent); real draft_forward -> ModelRunner.forward -> DP MAX_LEN "
    "padding 3->8 -> eager decode declines -> draft-step kernels run on the bs=3 plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        steps = 3
        draft_attn_backend = S.CpuMultiStepDraftBackend(steps)
        draft_runner = S.MiniModelRunner(
            S.CpuPlannedBackend("draft_runner"), is_draft_worker=True
        )
        worker = S.eagle_draft_worker(draft_runner, draft_attn_backend, steps=steps)
        fb = S.draft_decode_batch(3, steps=steps, global_num_tokens=[3, 8, 8, 8])
        # eagle_worker_v2.py draft(): not idle, speculative_num_steps > 1
        draft_attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        parent_list, top_scores_index, draft_tokens, _ = worker.draft_forward(fb)
        return S.summary(
            draft_plans=[b.plans for b in draft_attn_backend.attn_backends],
            draft_tokens_shape=list(draft_tokens.shape),
        )

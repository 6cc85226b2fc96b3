import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "EAGLE draft pre-plan+mark (bs=3) under DP attention where the gather picks SUM_LEN "
    "(counts [3,1,1,20] over 4 ranks): prepare_mlp_sync_batch does not reshape this rank, "
    "the decision declines and the draft kernels run on a plan of the right shape"
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
        fb = S.draft_decode_batch(3, steps=steps, global_num_tokens=[3, 1, 1, 20])
        draft_attn_backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        worker.draft_forward(fb)
        return S.summary(
            dp_padding_mode=str(fb.dp_padding_mode.name),
            draft_plans=[b.plans for b in draft_attn_backend.attn_backends],
        )

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "eagle_worker_common.prepare_for_draft_extend: draft runner's backend plans the "
    "DRAFT_EXTEND_V2 batch pre-pad (bs=2, 8 rows) and marks without replan_equivalent; "
    "draft_runner.forward pads to bs=4/16 rows (DP MAX_LEN) and EagerRunner._execute_extend "
    "(not verify, not CP) declines, so kernels run on the pre-pad plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuPlannedBackend("draft_extend")
        draft_runner = S.MiniModelRunner(backend, is_draft_worker=True)
        fb = S.draft_extend_v2_batch(2, 4, global_num_tokens=[8, 16, 12, 16])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        out = draft_runner.forward(fb)
        return S.summary(
            plans=backend.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

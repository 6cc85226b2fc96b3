import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "Same pre-pad draft-extend plan+mark (bs=1, num_draft_tokens=3 -> 3 rows) under "
    "attn-TP width 2: prepare_mlp_sync_batch ceil-aligns rows 3->4 while bs stays 1 "
    "(4 // 3); rows-only reshape, eager extend declines, kernels run on the 3-row plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env(tp=4, dp=2):
        from sglang.srt.runtime_context import get_parallel

        backend = S.CpuPlannedBackend("draft_extend")
        draft_runner = S.MiniModelRunner(backend, is_draft_worker=True)
        fb = S.draft_extend_v2_batch(1, 3, global_num_tokens=[3, 3])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        out = draft_runner.forward(fb)
        return S.summary(
            attn_tp_size=int(get_parallel().attn_tp_size),
            plans=backend.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

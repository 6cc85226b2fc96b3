import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "Pre-planner plans+marks a target decode batch at bs=3, then pads it itself for DP "
    "(real prepare_mlp_sync_batch, 3->8), re-plans and re-marks at the padded shape; the "
    "forward's MLP sync finds nothing left to pad, eager decode declines and kernels run "
    "on the padded plan (mark shape == launch shape)"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuPlannedBackend("target")
        runner = S.MiniModelRunner(backend)
        fb = S.decode_batch(3, global_num_tokens=[3, 8, 8, 8])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        fb.prepare_mlp_sync_batch(runner)  # pad for the DP gather
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()  # re-mark at the padded shape
        marked = [fb.forward_metadata_planned_bs, fb.forward_metadata_planned_num_tokens]
        out = runner.forward(fb)
        return S.summary(
            plans=backend.plans,
            remarked=marked,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

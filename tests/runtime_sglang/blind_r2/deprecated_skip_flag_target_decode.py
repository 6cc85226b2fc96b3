import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import warnings

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "Caller pre-plans a target DECODE batch (bs=3) and calls the real "
    "ModelRunner.forward(fb, skip_attn_backend_init=True); the deprecated flag is "
    "mapped to a mark at bs=3 before DP MAX_LEN padding 3->6, so eager decode "
    "declines and both layers launch on the bs=3 plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuPlannedBackend("target")
        runner = S.MiniModelRunner(backend)
        fb = S.decode_batch(3, global_num_tokens=[3, 6, 2, 6])
        backend.init_forward_metadata(fb)  # the caller's out-of-forward plan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            out = runner.forward(fb, skip_attn_backend_init=True)
        return S.summary(
            plans=backend.plans,
            marked=[fb.forward_metadata_planned_bs, fb.forward_metadata_planned_num_tokens],
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

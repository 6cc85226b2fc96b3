import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "Multi-layer EAGLE verify (metadata_ready_pre_pad): TARGET_VERIFY batch planned+marked "
    "pre-pad (bs=2, 8 rows), DP MAX_LEN pads to bs=4/16 rows and the decision declines, but "
    "EagerRunner._execute_extend re-plans TARGET_VERIFY anyway (through the base "
    "init_forward_metadata wrapper of a graph-style backend) before the kernels run"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuGraphStyleBackend("target_verify")
        runner = S.MiniModelRunner(backend)
        fb = S.verify_batch(2, 4, global_num_tokens=[8, 16, 12, 16])
        backend.init_forward_metadata(fb)  # pre-pad plan (cuda-graph load_batch style)
        fb.mark_forward_metadata_ready()
        out = runner.forward(fb)
        return S.summary(
            plans=backend.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "A mark site that opts into re-plan (mark_forward_metadata_ready(replan_equivalent=True), "
    "same backend object, as dllm does off-NPU): DP MAX_LEN pads decode 3->8, "
    "needs_forward_metadata_init() says re-plan and EagerRunner._execute_decode plans the "
    "padded batch (a dataclasses.replace copy, SGLANG_EAGER_INPUT_NO_COPY) before any "
    "kernel runs"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuPlannedBackend("target")
        runner = S.MiniModelRunner(backend, num_layers=3)
        fb = S.decode_batch(3, global_num_tokens=[3, 8, 8, 1])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready(replan_equivalent=True)
        with S.eager_input_no_copy():  # load_batch -> dataclasses.replace copy
            out = runner.forward(fb)
        return S.summary(
            plans=backend.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

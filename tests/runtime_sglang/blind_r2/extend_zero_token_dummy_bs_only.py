import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "A pre-planner (plan-stream style) plans+marks an EXTEND batch at bs=2/6 rows; a "
    "padding step then appends a zero-token dummy request with the real "
    "_pad_inputs_to_size (bs 2->3, rows stay 6). The forward (DP SUM_LEN, no further "
    "reshape) goes through EagerRunner._execute_extend, which declines (EXTEND, no CP) "
    "-> kernels run on the bs=2 plan: batch_size-only staleness"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        backend = S.CpuPlannedBackend("target")
        runner = S.MiniModelRunner(backend)
        fb = S.extend_batch([3, 3], global_num_tokens=[6, 9, 4, 7])
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        # Dummy request with no new tokens: requests padded, rows unchanged
        # (the same call prepare_mlp_sync_batch / _pad_tbo_child_inputs make).
        rows = fb.input_ids.shape[0]
        fb.batch_size = 3
        fb._pad_inputs_to_size(runner, rows, 3)
        shape_before_forward = [fb.batch_size, int(fb.input_ids.shape[0])]
        out = runner.forward(fb)
        return S.summary(
            plans=backend.plans,
            shape_before_forward=shape_before_forward,
            extend_seq_lens_cpu=list(fb.extend_seq_lens_cpu),
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

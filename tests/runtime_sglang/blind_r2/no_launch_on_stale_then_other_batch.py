import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "Overlap-style: batch B (bs=5) is pre-planned+marked first, then batch A (bs=3) is "
    "planned+marked, padded to 8 and declined by eager decode, but A's runner has an "
    "attention-free model (draft head) so nothing launches on A's stale plan; B then runs "
    "under DP SUM_LEN, is not reshaped, declines, and launches on its own matching plan"
)


def scenario():
    S.reset_log()
    with S.sglang_env():
        # Batch B: planned ahead (plan stream) on its own backend.
        b_backend = S.CpuPlannedBackend("target_B")
        b_runner = S.MiniModelRunner(b_backend)
        batch_b = S.decode_batch(5, global_num_tokens=[5, 1, 1, 20])
        b_backend.init_forward_metadata(batch_b)
        batch_b.mark_forward_metadata_ready()

        # Batch A: planned, marked, padded 3 -> 8, declined -- no attention layer.
        a_backend = S.CpuPlannedBackend("head_A")
        a_runner = S.MiniModelRunner(a_backend, is_draft_worker=True, num_layers=0)
        batch_a = S.draft_decode_batch(3, steps=1, global_num_tokens=[3, 8, 8, 8])
        a_backend.init_forward_metadata(batch_a)
        batch_a.mark_forward_metadata_ready()
        a_runner.forward(batch_a)
        calls_after_a = len(S.LAYER_CALLS)

        b_runner.forward(batch_b)
        return S.summary(
            attention_calls_on_a=calls_after_a,
            a_plans=a_backend.plans,
            b_plans=b_backend.plans,
            b_padding_mode=batch_b.dp_padding_mode.name,
        )

"""Pre-planned DECODE batch relabelled to a 1-token EXTEND by MAX_LEN padding.

This rank decodes 3 requests while another DP rank prefills 9 tokens; with the
DP prefill CUDA graph eligible, prepare_mlp_sync_batch forces MAX_LEN (bucket
12) and, because the batch is in an extend round, rewrites the decode rows as
1-token extends (forward_mode DECODE -> EXTEND, _original_forward_mode kept).
batch_size stays 3 but input_ids grows 3 -> 12 rows. The batch had been
planned and marked as a 3-row decode by a plan-stream pre-planner.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "marked 3-row DECODE is relabelled to 1-token EXTEND and padded to 12 rows (bs stays 3) "
    "by MAX_LEN prefill-graph padding; forward keeps the decode plan"
)


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        fb = S.make_batch(
            ForwardMode.DECODE,
            bs=3,
            rows=3,
            global_num_tokens=[3, 9],
            is_extend_in_batch=True,
            can_run_dp_prefill_cuda_graph=True,
        )
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(runner)
        assert fb.forward_mode == ForwardMode.EXTEND
        assert fb._original_forward_mode == ForwardMode.DECODE
        assert S.geometry(fb) == (3, 12), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, True, "decode relabelled to extend")

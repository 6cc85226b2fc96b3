"""EXTEND pre-planned, padded to a prefill-graph bucket: rows change, bs does not.

A plan-stream pre-planner (graph_runner.load_batch / init_forward_metadata
outside ModelRunner.forward) plans a 2-request, 5-token prefill and marks it.
Another DP rank prefills 11 tokens; with the DP prefill CUDA graph eligible,
prepare_mlp_sync_batch forces MAX_LEN and pads every rank to the captured
bucket (12). For EXTEND only input_ids/positions/out_cache_loc grow: batch_size
stays 2, rows go 5 -> 12. A guard comparing only batch_size misses this.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "pre-planned+marked 2-req/5-token EXTEND padded to the 12-token DP prefill-graph bucket; "
    "bs unchanged, rows 5->12, forward keeps the 5-row plan"
)


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        fb = S.make_batch(
            ForwardMode.EXTEND,
            bs=2,
            rows=5,
            extend=True,
            global_num_tokens=[5, 11],
            is_extend_in_batch=True,
            can_run_dp_prefill_cuda_graph=True,
        )
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(runner)
        assert fb.forward_mode == ForwardMode.EXTEND
        assert S.geometry(fb) == (2, 12), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, True, "prefill padded to graph bucket")

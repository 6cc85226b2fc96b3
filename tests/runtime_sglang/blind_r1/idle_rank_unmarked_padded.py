"""IDLE DP rank (no requests) padded to the peer's size: the forward plans it.

This rank has nothing to run (IDLE, batch_size 0, no rows) while the peer
decodes 4 tokens. prepare_mlp_sync_batch (MAX_LEN) turns it into 4 dummy
rows/requests. Nothing marked it, so needs_forward_metadata_init() is True.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (  # noqa: E402
    ForwardBatch,
    ForwardMode,
)

EXPECT = "passes"
WHY = "idle DP rank (bs 0) padded to 4 dummy rows; never marked, so the forward plans it"


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        empty = torch.empty(0, dtype=torch.int64)
        fb = ForwardBatch(
            forward_mode=ForwardMode.IDLE,
            batch_size=0,
            input_ids=empty.clone(),
            req_pool_indices=empty.clone(),
            seq_lens=empty.clone(),
            seq_lens_cpu=empty.clone(),
            orig_seq_lens=empty.clone(),
            out_cache_loc=empty.clone(),
            seq_lens_sum=0,
            positions=empty.clone(),
            global_num_tokens_cpu=[0, 4],
            global_num_tokens_gpu=torch.zeros(2, dtype=torch.int64),
            global_num_tokens_for_logprob_cpu=[0, 4],
            global_num_tokens_for_logprob_gpu=torch.zeros(2, dtype=torch.int64),
        )
        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(runner)
        assert S.geometry(fb) == (4, 4), S.geometry(fb)

        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, False, "idle rank after DP padding")

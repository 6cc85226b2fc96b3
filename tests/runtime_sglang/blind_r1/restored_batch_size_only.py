"""Batch size restored after the forward, rows not: only batch_size differs.

A DECODE batch (3 reqs) is DP-padded to 8 reqs/8 rows by
prepare_mlp_sync_batch; a post-pad planner plans it and marks it (record
8/8, healthy at this point, and needs_forward_metadata_init() correctly says
"keep"). After the forward, post_forward_mlp_sync_batch restores batch_size to
3 and slices positions/seq_lens back, but leaves input_ids at 8 rows. The same
ForwardBatch then goes down the decode-graph path, whose load_batch asks
needs_forward_metadata_init() without running prepare_mlp_sync_batch again:
"keep the plan" for a batch that now says 3 requests against an 8-request
plan. Only batch_size differs from the record (rows still 8).
"""

import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _blind_r1_support as S  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

EXPECT = "caught"
WHY = (
    "marked post-pad at 8 reqs/8 rows; post_forward_mlp_sync_batch restores batch_size 3 but "
    "keeps 8 input_ids rows; a re-forward that skips DP re-padding keeps the 8-req plan (bs-only change)"
)


def scenario() -> None:
    with S.dp_runtime():
        backend = S.RecordingAttnBackend("target")
        runner = S.model_runner(backend=backend)
        fb = S.make_batch(ForwardMode.DECODE, bs=3, rows=3, global_num_tokens=[3, 8])

        fb.apply_deprecated_skip_attn_backend_init(None)
        fb.prepare_mlp_sync_batch(runner)
        assert S.geometry(fb) == (8, 8), S.geometry(fb)
        # post-pad planner: plan right next to the mark
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        stale = S.forward_decides_and_runs(fb, backend)  # first forward: fine
        S.check(stale, False, "first forward")

        logits = SimpleNamespace(
            next_token_logits=torch.zeros(8, 16),
            hidden_states=None,
            last_hidden_states=None,
        )
        fb.post_forward_mlp_sync_batch(logits)
        assert S.geometry(fb) == (3, 8), S.geometry(fb)

        # second forward on the same batch via the graph path (no re-padding)
        stale = S.forward_decides_and_runs(fb, backend)
        S.check(stale, True, "re-forward after batch_size restore")

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import contextlib
from types import SimpleNamespace

import _sgsupport as S  # noqa: E402

EXPECT = "caught"
WHY = (
    "Frozen-KV style draft: real _init_frozen_kv_metadata plans+marks bs=3; the worker pads "
    "the batch for DP itself (prepare_mlp_sync_batch, 3->6) and re-plans at 6 without "
    "re-marking; a later DP sync widens the gather and the forward pads again 6->12, eager "
    "decode declines -> kernels run on the bs=6 plan (re-planned once, stale again)"
)


def scenario():
    from sglang.srt.model_executor.forward_context import (
        ForwardContext,
        forward_context,
    )
    from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

    S.reset_log()
    with S.sglang_env():
        draft_attn_backend = S.CpuGraphStyleBackend("frozen_kv_draft")
        draft_model_runner = S.MiniModelRunner(
            S.CpuPlannedBackend("draft_runner_default"), is_draft_worker=True
        )
        worker = SimpleNamespace(
            draft_attn_backend=draft_attn_backend,
            _frozen_kv_target_view=lambda fb: contextlib.nullcontext(),
        )
        fb = S.draft_decode_batch(3, steps=1, global_num_tokens=[3, 6, 6, 6])
        FrozenKVMTPDraftWorker._init_frozen_kv_metadata(worker, fb)
        fb.prepare_mlp_sync_batch(draft_model_runner)
        draft_attn_backend.init_forward_metadata(fb)  # post-pad re-plan, no re-mark
        after_replan = [fb.batch_size, int(fb.input_ids.shape[0])]
        S.set_dp_counts(fb, [6, 12, 9, 12])  # the next DP sync's counts
        with forward_context(
            ForwardContext(attn_backend=draft_attn_backend), forward_batch=fb
        ):
            draft_model_runner.forward(fb)
        return S.summary(
            marked=[fb.forward_metadata_planned_bs, fb.forward_metadata_planned_num_tokens],
            after_replan=after_replan,
            draft_plans=draft_attn_backend.plans,
        )

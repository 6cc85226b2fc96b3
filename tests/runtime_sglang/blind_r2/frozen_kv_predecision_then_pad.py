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
    "frozen_kv_mtp_worker_v2 draft_forward: the worker itself asks "
    "needs_forward_metadata_init() (True, fresh batch), runs the real "
    "_init_frozen_kv_metadata (plan bs=3 + mark), then the seed forward under "
    "ForwardContext(draft_attn_backend) pads 3->8 (DP MAX_LEN); eager decode's own "
    "decision declines, so the draft backend's kernels run on the bs=3 plan"
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
        # Frozen-KV drafts write no KV: one cache slot row per request.
        fb = S.draft_decode_batch(3, steps=1, global_num_tokens=[3, 8, 5, 8])
        decisions = []
        first = fb.needs_forward_metadata_init()
        decisions.append(first)
        if first:
            FrozenKVMTPDraftWorker._init_frozen_kv_metadata(worker, fb)
        with forward_context(
            ForwardContext(attn_backend=draft_attn_backend), forward_batch=fb
        ):
            out = draft_model_runner.forward(fb)
        return S.summary(
            pre_planner_decision=decisions,
            draft_plans=draft_attn_backend.plans,
            default_backend_plans=draft_model_runner.attn_backend.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

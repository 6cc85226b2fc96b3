import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for the _sgsupport helper next to this file

import _sgsupport as S  # noqa: E402

EXPECT = "passes"
WHY = (
    "TARGET_VERIFY marked pre-pad, DP pads bs 2->4 (8->16 rows), decision declines; "
    "EagerRunner._execute_extend re-plans model_runner.attn_backend (a wrapper that shares "
    "its plan with its child by assignment) while the layers launch through the child "
    "published in an outer ForwardContext: re-planned via a different backend object, "
    "the launching child's metadata is fresh"
)


def scenario():
    from sglang.srt.model_executor.forward_context import (
        ForwardContext,
        forward_context,
    )

    S.reset_log()
    with S.sglang_env():
        wrapper = S.CpuSharedPlanWrapper("verify_wrapper")
        runner = S.MiniModelRunner(wrapper)
        fb = S.verify_batch(2, 4, global_num_tokens=[8, 16, 16, 4])
        wrapper.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        with forward_context(ForwardContext(attn_backend=wrapper.child), forward_batch=fb):
            out = runner.forward(fb)
        return S.summary(
            wrapper_plans=wrapper.plans,
            child_plans=wrapper.child.plans,
            logits_rows=int(out.logits_output.next_token_logits.shape[0]),
        )

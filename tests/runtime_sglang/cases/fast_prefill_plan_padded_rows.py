"""SGLang's per-instance planner for CUDA-graph prefill wrappers, then a launch with more query rows than planned."""

from wrappers import graph_prefill_wrapper, launch, plan_requests, sglang_uses_fast_prefill_plan

EXPECT = "caught"
WHY = "begin_forward = partial(fast_prefill_plan, w) plans 3 requests x 3 rows (9); run gets 12 rows"


def scenario() -> list[str]:
    w = graph_prefill_wrapper(3)
    assert sglang_uses_fast_prefill_plan(w)  # installing the guard did not change SGLang's answer
    plan_requests(w, [3, 3, 3])
    launch(w, 12)
    return w._cached_module.calls

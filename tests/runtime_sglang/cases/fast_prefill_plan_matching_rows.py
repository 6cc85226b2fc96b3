"""SGLang's per-instance planner, then a launch with the planned rows, re-planned for a second batch."""

from wrappers import graph_prefill_wrapper, launch, plan_requests, sglang_uses_fast_prefill_plan

EXPECT = "passes"
WHY = "fast_prefill_plan for 9 rows then run with 9; re-planned for 3 x 4 rows and run with 12"


def scenario() -> list[str]:
    w = graph_prefill_wrapper(3)
    assert sglang_uses_fast_prefill_plan(w)
    plan_requests(w, [3, 3, 3])
    launch(w, 9)
    plan_requests(w, [4, 4, 4])
    launch(w, 12)
    return w._cached_module.calls

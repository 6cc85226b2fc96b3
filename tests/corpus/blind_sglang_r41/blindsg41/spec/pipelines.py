"""Draft steps expressed as pipelines of small step functions.

A pipeline state is a plain dict with ``runner`` (ModelRunner), ``backend``
(attention backend to pre-plan on), ``fb`` (ForwardBatch) and ``out``.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync

from blindsg41.common.plan_utils import compose

State = Dict[str, Any]


def _draft_only(fb: ForwardBatch) -> ForwardBatch:
    if fb.forward_mode.is_target_verify():
        raise ValueError("verify batches go through run_eagle_verify")
    return fb


def _state(runner: ModelRunner, backend: Any, fb: ForwardBatch) -> State:
    _draft_only(fb)
    return {"runner": runner, "backend": backend, "fb": fb, "out": None}


def step_plan(state: State) -> State:
    state["backend"].init_forward_metadata(state["fb"])
    return state


def step_mark(state: State) -> State:
    state["fb"].mark_forward_metadata_ready()
    return state


def step_forward(state: State) -> State:
    state["out"] = state["runner"].forward(state["fb"]).logits_output
    return state


def step_require_single_rank(state: State) -> State:
    if require_mlp_sync():
        raise RuntimeError("pre-planned draft pipeline needs DP attention off")
    return state


def _mark_with(fb: ForwardBatch, *, replan_equivalent: bool) -> ForwardBatch:
    fb.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return fb


PIPELINES: Dict[str, List[Callable[[State], State]]] = {
    "draft_extend": [step_plan, step_mark, step_forward],
    "draft_extend_lazy": [step_plan, step_forward],
}

MARKERS: Dict[str, Callable[[ForwardBatch], ForwardBatch]] = {
    "pinned": partial(_mark_with, replan_equivalent=False),
    "replan": partial(_mark_with, replan_equivalent=True),
}

ACTIONS: Dict[str, Callable[[SimpleNamespace], Any]] = {
    "plan": lambda st: st.backend.init_forward_metadata(st.fb),
    "mark": lambda st: st.fb.mark_forward_metadata_ready(),
    "forward": lambda st: st.runner.forward(st.fb),
}


# expect: SG106
def run_extend_pipeline(runner: ModelRunner, fb: ForwardBatch):
    steps = [step_plan, step_mark, step_forward]
    return compose(*steps)(_state(runner, runner.attn_backend, fb))["out"]


# expect: clean
def run_extend_pipeline_v2(runner: ModelRunner, fb: ForwardBatch):
    steps = [step_require_single_rank, step_plan, step_mark, step_forward]
    return compose(*steps)(_state(runner, runner.attn_backend, fb))["out"]


# expect: SG106
def run_named_pipeline(runner: ModelRunner, fb: ForwardBatch):
    state = _state(runner, runner.attn_backend, fb)
    for step in PIPELINES["draft_extend"]:
        state = step(state)
    return state["out"]


# expect: clean
def run_named_pipeline_alt(runner: ModelRunner, fb: ForwardBatch):
    state = _state(runner, runner.attn_backend, fb)
    for step in PIPELINES["draft_extend_lazy"]:
        state = step(state)
    return state["out"]


# expect: SG106
def run_with_marker_a(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb = MARKERS["pinned"](fb)
    return runner.forward(fb).logits_output


# expect: clean
def run_with_marker_b(runner: ModelRunner, fb: ForwardBatch):
    fb = _draft_only(fb)
    runner.attn_backend.init_forward_metadata(fb)
    fb = MARKERS["replan"](fb)
    return runner.forward(fb).logits_output


# expect: SG106
def run_action_table(runner: ModelRunner, fb: ForwardBatch):
    st = SimpleNamespace(runner=runner, backend=runner.attn_backend, fb=_draft_only(fb))
    for name in ("plan", "mark"):
        ACTIONS[name](st)
    return ACTIONS["forward"](st).logits_output


# expect: clean
def run_closure_stepper(runner: ModelRunner, batches: List[ForwardBatch]):
    single_rank = not require_mlp_sync()

    def step(fb: ForwardBatch):
        _draft_only(fb)
        runner.attn_backend.init_forward_metadata(fb)
        if single_rank:
            fb.mark_forward_metadata_ready()
        return runner.forward(fb).logits_output

    return [step(fb) for fb in batches]


# expect: SG106
def draft_step_gen(
    runner: ModelRunner, multi_step_backend: Any, fb: ForwardBatch, num_steps: int
) -> Iterator[Any]:
    _draft_only(fb)
    multi_step_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    for i in range(num_steps - 1):
        with forward_context(
            ForwardContext(attn_backend=multi_step_backend.attn_backends[i]),
            forward_batch=fb,
        ):
            logits_output = runner.forward(fb).logits_output
        fb.positions.add_(1)
        fb.input_ids = logits_output.next_token_logits.argmax(dim=-1)
        yield logits_output


# expect: clean
def draft_step_gen_v2(
    runner: ModelRunner, multi_step_backend: Any, fb: ForwardBatch, num_steps: int
) -> Iterator[Any]:
    _draft_only(fb)
    multi_step_backend.init_forward_metadata(fb)
    if fb.global_num_tokens_cpu is None:
        fb.mark_forward_metadata_ready()
    for i in range(num_steps - 1):
        with forward_context(
            ForwardContext(attn_backend=multi_step_backend.attn_backends[i]),
            forward_batch=fb,
        ):
            logits_output = runner.forward(fb).logits_output
        fb.positions.add_(1)
        fb.input_ids = logits_output.next_token_logits.argmax(dim=-1)
        yield logits_output


def drive(gen: Iterator[Any]) -> List[Any]:
    return list(gen)

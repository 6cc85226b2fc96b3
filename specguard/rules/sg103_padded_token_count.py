"""SG103 padded-token-count: a DP/graph-padded token count reaches the metadata builder outside FULL mode."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.analysis.cst_tools import (
    Event,
    GuardWalk,
    full_test,
    is_self_call,
    keyword,
    kids,
    last_name,
    scopes,
)
from specguard.rules.base import Diagnostic, Rule, RuleContext, speculator_module


class PaddingFlow:
    """Which names in one function hold a batch descriptor, and which hold its padded token count."""

    def __init__(self, ctx: RuleContext, function: cst.FunctionDef, events: list[Event]) -> None:
        pad = ctx.pack.padding
        self.ctx = ctx
        self.attribute = pad.padded_attribute or ""
        self.mode = (pad.mode_attribute or "", pad.full_mode or "")
        self.descriptors = {
            p.name.value
            for p in (*function.params.params, *function.params.kwonly_params, *function.params.posonly_params)
            if p.annotation is not None and last_name(p.annotation.annotation) in pad.descriptor_types
        }
        self.padded: set[str] = set()
        assignments = [e for e in events if e.targets and e.value is not None]
        changed = True
        while changed:  # a fixpoint: taint flows through any number of local copies
            changed = False
            for event in assignments:
                value = event.value
                if self._is_descriptor(value):
                    new, into = set(event.targets), self.descriptors
                elif not event.guarded and self.carries_padding(value, False):
                    new, into = set(event.targets), self.padded
                else:
                    continue
                if not new <= into:
                    into |= new
                    changed = True

    def _is_descriptor(self, value: cst.BaseExpression) -> bool:
        """A producer's result (tuple unpacking included), or a copy of a known descriptor."""
        if isinstance(value, cst.Call):
            return self.ctx.calls_function(value, self.ctx.pack.padding.descriptor_producers)
        return isinstance(value, cst.Name) and value.value in self.descriptors

    def carries_padding(self, node: cst.CSTNode, guarded: bool) -> bool:
        """Does `node` evaluate the padded count on a path no FULL-mode test covers?"""
        if guarded:
            return False
        if isinstance(node, cst.IfExp):
            kind = full_test(node.test, *self.mode)
            return (
                self.carries_padding(node.test, False)
                or self.carries_padding(node.body, kind == "eq")
                or self.carries_padding(node.orelse, kind == "ne")
            )
        if isinstance(node, cst.Attribute):
            owner = node.value
            if node.attr.value == self.attribute and isinstance(owner, cst.Name) and owner.value in self.descriptors:
                return True
            return self.carries_padding(node.value, False)
        if isinstance(node, cst.Name):
            return node.value in self.padded
        if isinstance(node, cst.Arg):
            return self.carries_padding(node.value, False)
        return any(self.carries_padding(child, False) for child in kids(node))


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    pad = ctx.pack.padding
    helpers = ctx.pack.speculators.shared_helpers
    for scope in scopes(ctx.module):
        if not ctx.speculator_scope(scope.class_name):
            continue
        events = GuardWalk(pad.mode_attribute or "", pad.full_mode or "").run(scope.function.body)
        flow = PaddingFlow(ctx, scope.function, events)
        if not flow.descriptors:
            continue
        for event in events:
            call = event.node
            if event.guarded or not isinstance(call, cst.Call):
                continue
            to_helper = is_self_call(call) and ctx.callee(call) in helpers
            if not (to_helper or ctx.calls_function(call, ctx.pack.metadata.sink)):
                continue
            for param in ctx.pack.metadata.token_count_params:
                arg = keyword(call, param)
                if arg is not None and flow.carries_padding(arg.value, False):
                    yield Diagnostic(
                        arg,
                        f"`{scope.qualname}` passes a padded batch size (`{pad.padded_attribute}` of a "
                        f"batch-execution descriptor) as `{param}=` to `{ctx.callee(call)}` without a "
                        f"`{pad.mode_attribute} == {pad.full_mode}` check; in eager/PIECEWISE mode it must be "
                        f"the real query token count (`query_start_loc[-1]`)",
                        scope.qualname,
                    )


RULE = Rule(
    code="SG103",
    name="padded-token-count",
    title="padded token count reaches the metadata builder outside FULL CUDA graphs",
    summary=(
        "Flags a padded batch size (`num_tokens` of a batch-execution descriptor, such as the one "
        "`dispatch_cg_and_sync_dp` returns, or a variable holding it) that reaches the token-count argument of "
        "the metadata sink or of a speculator metadata helper (`num_tokens=`, `num_tokens_padded=`) on a path "
        "where no enclosing `if` or conditional expression checks `cg_mode == CUDAGraphMode.FULL`."
    ),
    why=(
        "With data parallelism the descriptor's token count includes DP padding that no request owns, while "
        "`query_start_loc` counts real tokens. Only a FULL CUDA graph replays the padded shape; in eager or "
        "PIECEWISE mode FlashInfer refuses the launch (`q.shape[0] (52) does not match qo_indptr[-1] (48)`), "
        "which is how DFlash failed to start with DP>1."
    ),
    bad="""
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                num_tokens_padded = batch_desc.num_tokens
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_tokens_padded=num_tokens_padded, step=1,
                )
    """,
    good="""
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens, query_start_loc_np):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                num_tokens_padded = (
                    batch_desc.num_tokens
                    if batch_desc.cg_mode == CUDAGraphMode.FULL
                    else int(query_start_loc_np[-1])
                )
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_tokens_padded=num_tokens_padded, step=1,
                )
    """,
    check=check,
    applies=speculator_module,
)

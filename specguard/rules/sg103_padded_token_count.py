"""SG103 padded-token-count: a DP/graph-padded token count reaches the metadata builder outside FULL mode."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from specguard.analysis.ast_tools import callee_text, dotted, is_bound_method, scopes, span
from specguard.analysis.dataflow.calls import Passed, bind
from specguard.analysis.dataflow.project import ProjectHooks
from specguard.analysis.dataflow.resolve import MAX_DEPTH
from specguard.analysis.dataflow.resolve import MAX_ROUNDS as ATTRIBUTE_ROUNDS
from specguard.analysis.dataflow.values import Item, Value
from specguard.analysis.dataflow.walker import MAX_ROUNDS, FlowWalker, parameter_env
from specguard.fixes.ast_edits import enclosing_statement, indent_unit, place
from specguard.fixes.import_edits import add_import
from specguard.fixes.layout import Layout, flat
from specguard.fixes.model import Edit
from specguard.fixes.query_count import QueryNames, Reached, real_count
from specguard.rules.base import Diagnostic, Limit, NodeFix, NoFix, Rule, RuleContext, speculator_module

PADDED = "padded"  # the label Pack.padding_flow gives a descriptor's padded count


class _Sinks(ProjectHooks):
    """At each call of the sink or of a shared helper: a padded count reaching a token-count parameter."""

    def __init__(
        self,
        ctx: RuleContext,
        class_name: str | None,
        self_name: str | None,
        qualname: str,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
    ) -> None:
        super().__init__(ctx.facts, ctx.pack.padding_flow, class_name, self_name)
        self.ctx, self.function = ctx, function
        self.qualname = qualname
        self.found: list[Diagnostic] = []

    def _sink(self, func: ast.expr) -> str | None:
        text = callee_text(func, self.self_name)
        if text is not None and text.startswith(("self.", "super().")):
            name = text.rpartition(".")[2]
            return name if name in self.ctx.pack.speculators.shared_helpers else None
        name = self.callee(func)
        return name if name in self.ctx.pack.metadata.sink else None

    def on_call(self, node: ast.Call, args: list[Passed]) -> None:
        callee = self._sink(node.func)
        if callee is None:
            return
        wanted = self.ctx.pack.metadata.token_count_params
        for param, reaching in bind(self.signature(node.func), args).items():
            if param not in wanted:
                continue
            for arg, value in reaching:
                padded = [i for i in value.values() if i.label == PADDED and i.key is None]
                if padded:
                    first = min(padded, key=lambda i: len(i.steps))
                    fix = full_or_real_fix(self.ctx, self, node, arg, first)
                    self.found.append(self._diagnostic(callee, param, arg, first, fix))
                    break

    def reached(self, func: ast.expr) -> Reached:
        """What the project says about the function a call reaches."""
        key = self.key(func)
        return self.reached_key(key) if key is not None else Reached(None, None)

    def reached_key(self, key: str) -> Reached:
        flow = self.facts.flows.function_map.get(key)
        return Reached(flow.qualname, flow.signature) if flow is not None else Reached(None, None)

    def _diagnostic(self, callee: str, param: str, arg: Passed, item: Item, fix: NodeFix | NoFix) -> Diagnostic:
        pad = self.ctx.pack.padding
        passed = {
            "": f"`{param}=`" if arg.keyword else f"`{param}` (by position)",
            "*": f"`{param}` (unpacked with `*`)",
            "**": f"`{param}` (unpacked with `**`)",
        }[arg.star]
        how = item.how()
        return Diagnostic(
            None,
            f"`{self.qualname}` passes a padded batch size (`{pad.padded_attribute}` of a batch-execution "
            f"descriptor) as {passed} to `{callee}` without a `{pad.mode_attribute} == {pad.full_mode}` check; in "
            f"eager/PIECEWISE mode it must be the real query token count (`query_start_loc[-1]`)"
            + (f"; it gets there {how}" if how else "")
            + (f"; no fix offered: {fix.reason}" if isinstance(fix, NoFix) else ""),
            self.qualname,
            span(arg.node),  # type: ignore[arg-type]
            fix=fix if isinstance(fix, NodeFix) else None,
        )


# ---- the fix: the padded count under FULL graphs, the real count of the call's query otherwise ---------------


def full_or_real_fix(ctx: RuleContext, hooks: _Sinks, call: ast.Call, arg: Passed, item: Item) -> NodeFix | NoFix:
    """Rewrite the argument to `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`, what
    upstream's shared helper decides, where the descriptor the padded count was read from is in scope and the
    real count of the query this call describes follows from its arguments (fixes/query_count.py)."""
    pad = ctx.pack.padding
    if not (pad.mode_attribute and pad.full_mode and pad.mode_enum):
        return NoFix("the rule pack names no CUDA-graph mode to test (`[padding] mode_enum`)")
    if arg.star:
        return NoFix(f"the count reaches the call inside `{arg.star}` arguments, with nothing to rewrite in place")
    function = hooks.function
    reads = (n for n in ast.walk(function) if isinstance(n, ast.Attribute) and n.attr == pad.padded_attribute)
    read = next((n for n in reads if span(n) == item.span), None)
    descriptor = dotted(read.value) if read is not None else None
    if read is None or descriptor is None:
        return NoFix("the padded count is read in another function, so the descriptor that decides is not in scope")
    if _rebound(function, descriptor, read, call):
        return NoFix(f"`{descriptor}` is assigned again between the read of its count and the call")
    names = QueryNames(tuple(pad.query_offsets), tuple(pad.query_requests), tuple(pad.query_width))
    real = real_count(
        call,
        hooks.reached(call.func),
        names,
        caller_self=hooks.self_name,
        bases=frozenset(ctx.pack.speculators.bases),
        classes={c.name: c for c in ctx.tree.body if isinstance(c, ast.ClassDef)},
        lookup=hooks.reached_key,
        caller=function,
    )
    if isinstance(real, NoFix):
        return real
    enum = _mode_enum(ctx, pad.mode_enum)
    if enum is None:
        return NoFix(f"`{pad.mode_enum.rpartition('.')[2]}` means something else in this module")
    value = arg.node.value if isinstance(arg.node, ast.keyword) else arg.node
    written = ast.get_source_segment(ctx.text, value) if isinstance(value, ast.expr) else None
    padded = flat(written) if written is not None else None
    if padded is None or not isinstance(value, ast.expr):
        return NoFix("the padded argument spans lines with a comment, which a fix cannot move")
    if isinstance(value, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
        padded = f"({padded})"
    name, import_edit = enum
    parts = [padded, f"if {descriptor}.{pad.mode_attribute} == {name}.{pad.full_mode}", f"else {real}"]
    statement = enclosing_statement(function, value)
    layout = Layout(ctx.facts.line_length, indent_unit(ctx.text, function))
    edit = place(ctx.text, value, layout, ("(", parts, ")", " ".join(parts)), statement, call) if statement else None
    if edit is None:
        return NoFix("the rewritten argument cannot be laid out within the line length where it stands")
    return NodeFix(
        "unsafe",
        f"Pass `{padded}` only under FULL CUDA graphs and the real count of the call's query, `{real}`, otherwise",
        (),
        (edit, *import_edit),
    )


def _rebound(function: ast.FunctionDef | ast.AsyncFunctionDef, descriptor: str, read: ast.AST, call: ast.Call) -> bool:
    """Whether the descriptor (`d`, `self.desc`) or what holds it is assigned after the read and before the call
    ends: the mode tested at the call would then be another descriptor's."""
    start, end = (read.lineno, read.col_offset), (call.end_lineno or call.lineno, call.end_col_offset or 0)  # type: ignore[attr-defined]
    holders = {".".join(descriptor.split(".")[:i]) for i in range(1, descriptor.count(".") + 2)}
    stores = (
        n for n in ast.walk(function) if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store)
    )
    return any(dotted(n) in holders and start < (n.lineno, n.col_offset) < end for n in stores)


def _mode_enum(ctx: RuleContext, qualified: str) -> tuple[str, tuple[Edit, ...]] | None:
    """The local name of the mode enum, and the import that binds it where the module has none."""
    module, _, name = qualified.rpartition(".")
    for local, target in ctx.facts.imports:
        if target == qualified or target.rpartition(".")[2] == name:  # also re-exported, or imported as another name
            return local, ()
    if name in ctx.facts.local_names or any(local == name for local, _ in ctx.facts.imports):
        return None  # the name means something else here
    return name, (add_import(ctx.source, module, name),)


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    spec = ctx.pack.padding_flow
    for class_name, func in scopes(ctx.tree):
        if not ctx.speculator_scope(class_name):
            continue
        bound = is_bound_method(class_name, func)
        first = [*func.args.posonlyargs, *func.args.args][:1]
        self_name = first[0].arg if bound and first else None
        qualname = f"{class_name}.{func.name}" if class_name else func.name
        hooks = _Sinks(ctx, class_name, self_name, qualname, func)
        env: dict[str, Value] = parameter_env(func, spec, symbolic=False, bound=bound)[0]
        FlowWalker(spec, hooks, self_name=self_name, qualname=qualname).run(func, env)
        yield from hooks.found


RULE = Rule(
    code="SG103",
    name="padded-token-count",
    title="padded token count reaches the metadata builder outside FULL CUDA graphs",
    summary=(
        "Flags a padded batch size (`num_tokens` of a batch-execution descriptor: the result of "
        "`dispatch_cg_and_sync_dp`, a parameter or variable annotated `BatchExecutionDescriptor`, or a parameter "
        "named `batch_desc`) that reaches a token-count parameter (`num_tokens`, `num_tokens_padded`) of the "
        "metadata sink or of a speculator's shared metadata helper on a path where its CUDA-graph mode is not "
        "known to be FULL. The message names the path the value took when it is not direct."
    ),
    why=(
        "With data parallelism the descriptor's token count includes DP padding that no request owns, while "
        "`query_start_loc` counts real tokens. Only a FULL CUDA graph replays the padded shape; in eager or "
        "PIECEWISE mode FlashInfer refuses the launch (`q.shape[0] (52) does not match qo_indptr[-1] (48)`), "
        "which is how DFlash failed to start with DP>1."
    ),
    analysis=(
        "Sources: the padded attribute of a descriptor. Inside a function the value is followed through "
        "assignments, augmented assignments, tuple unpacking, conditional and boolean expressions, arithmetic, "
        "builtins such as `max`/`min`/`int`, containers (`dict(...)`, `{...}`, `[...]`, `d[k] = v`, "
        "`d.update(...)`) and their `*`/`**` unpacking into a call, in statement order: the value at the use is "
        "what counts. Slicing a buffer with it (`buf[:n]`) or passing it to an unknown function does not carry it.",
        "Across functions of the analyzed project: a helper (method of the class or a base, `super()`, or a "
        "module-level function, imported or not) whose return value is a descriptor's padded count, one of its "
        "arguments, or another helper's result; and instance attributes written from a padded count in any "
        "method of the class or a base and read in another. A module's summaries are computed the first time a "
        f"checked file needs them and cached with its scan; a chain of helpers is followed {MAX_DEPTH} calls "
        "deep, a recursive helper contributes nothing to itself, attributes written from attributes get "
        f"{ATTRIBUTE_ROUNDS} rounds, and a loop body is walked until its locals stop changing ({MAX_ROUNDS} times "
        "at most).",
        "Sinks: the token-count parameters of the sink and the shared helpers, matched by keyword, by position "
        "(the signature comes from the project's own definition, when the project defines the callee) and "
        "through a `**kwargs` dict or `*args` sequence that holds the value.",
        "Sanitizer: a use is clear when every path to it passes a test that the descriptor's mode is FULL: an "
        "enclosing `if`/`elif`/conditional expression, an early `return`/`raise`/`continue` under the negated "
        "test, an `assert`, a `match` case, or a later reassignment of the real count on every other path. "
        "`==`, `!=`, `is`, `is not` and `in` are understood in either operand order, with the mode read from the "
        "descriptor or from a local holding it. A mode test on an object that is not a known descriptor "
        "clears every descriptor.",
    ),
    limits=(
        Limit(
            "Properties, `getattr` and values stored on objects other than `self` are not followed.",
            missed="""
                from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def prepare(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        self.state.padded = batch_desc.num_tokens

                    def propose(self, num_reqs):
                        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.state.padded)
            """,
        ),
        Limit(
            "A function of another module is followed only when it is passed a descriptor or a padded count, and a "
            "value passed into a helper that itself calls the sink is judged inside the helper (its parameter is "
            "not a descriptor there unless named or annotated as one)."
        ),
    ),
    references=(
        'vllm-project/vllm#56181 ("Fix DP token padding in dflash attention metadata", in vLLM 0.30.0): the shared '
        "helper `DraftModelSpeculator._build_attn_metadata` takes the descriptor's count for FULL CUDA graphs and "
        "`query_start_loc_np[-1]` otherwise; DFlash's `q.shape[0] (52) does not match qo_indptr[-1] (48)` at "
        "startup with DP>1 is the failure it fixed.",
        'vllm-project/vllm#55458 ("Exclude DP token padding from draft attention metadata"): the same DP '
        "padding, fixed first in the autoregressive draft decode.",
    ),
    bad="""
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def _padded(self, batch_desc):
                return batch_desc.num_tokens

            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = self._padded(batch_desc)  # a helper's return value
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # SG103

            def propose_step(self, num_reqs, batch_desc):
                kwargs = dict(num_reqs=num_reqs, num_tokens_padded=max(num_reqs, batch_desc.num_tokens))
                return self._build_draft_attn_metadata(**kwargs, step=1)  # SG103: through **kwargs

            def propose_block(self, num_reqs, batch):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, batch.num_tokens)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=d.num_tokens,  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )
    """,
    good="""
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens, query_start_loc_np):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                num_tokens_padded = batch_desc.num_tokens
                if batch_desc.cg_mode != CUDAGraphMode.FULL:
                    num_tokens_padded = int(query_start_loc_np[-1])  # the real count on every other path
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=num_tokens_padded)

            def propose_step(self, num_reqs, batch_desc, query_start_loc_np):
                match batch_desc.cg_mode:
                    case CUDAGraphMode.FULL:
                        n = batch_desc.num_tokens
                    case _:
                        n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, step=1)

            def replay(self, num_reqs, batch_desc):
                if batch_desc.cg_mode != CUDAGraphMode.FULL:
                    raise ValueError("replay needs a FULL CUDA graph")
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
    """,
    check=check,
    applies=speculator_module,
    fix_availability="sometimes",
    fix_summary=(
        "Unsafe: the argument becomes `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`,"
        " the choice upstream's shared helper makes, and `CUDAGraphMode` is imported where the module lacks it. "
        "The real count is that of the query this very call builds metadata for, read off the call's own "
        "arguments as the pack describes them (`[padding] query_offsets`, `query_requests`, `query_width`): "
        "`int(<offsets>[<num_reqs>])` when the call hands the build its query start offsets, else `<num_reqs> * "
        "<num_query_per_req>` for the uniform query the helper builds, the width's default read from the helper's"
        " definition, and an override in the same module that only checks its arguments and forwards them to "
        "`super()` followed through that call. A count found elsewhere in the function is never taken: a draft "
        "decode step that sees the target batch's offsets builds one token per request. Offered only where the "
        "descriptor the padded count was read from is in scope at the call and that count follows; otherwise the "
        "finding keeps no fix and its message says why (a count from a helper or through `**kwargs`, a call that "
        "does not say its query, an override in another module). It is unsafe because what the helper builds from"
        " its arguments is the pack's description of it, a subclass elsewhere may override the helper again, and "
        "eager/PIECEWISE builds whose count carried graph or DP padding change, which is the point of the fix; "
        "the better fix, moving to the shared helper that decides, needs a person."
    ),
    fixed="""
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
        from vllm.config.compilation import CUDAGraphMode

        class MyDraftSpeculator(DraftModelSpeculator):
            def _padded(self, batch_desc):
                return batch_desc.num_tokens

            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = self._padded(batch_desc)  # a helper's return value
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # SG103

            def propose_step(self, num_reqs, batch_desc):
                kwargs = dict(num_reqs=num_reqs, num_tokens_padded=max(num_reqs, batch_desc.num_tokens))
                return self._build_draft_attn_metadata(**kwargs, step=1)  # SG103: through **kwargs

            def propose_block(self, num_reqs, batch):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, batch.num_tokens)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=(
                        d.num_tokens
                        if d.cg_mode == CUDAGraphMode.FULL
                        else int(batch.query_start_loc_np[num_reqs])
                    ),  # SG103
                    query_start_loc_np=batch.query_start_loc_np,
                )
    """,
)

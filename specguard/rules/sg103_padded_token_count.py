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
from specguard.fixes.ast_edits import replace_node
from specguard.fixes.import_edits import add_import
from specguard.fixes.model import Edit
from specguard.rules.base import Diagnostic, Limit, NodeFix, Rule, RuleContext, speculator_module

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
                    fix = full_or_real_fix(self.ctx, self.function, arg, first)
                    self.found.append(self._diagnostic(callee, param, arg, first, fix))
                    break

    def _diagnostic(self, callee: str, param: str, arg: Passed, item: Item, fix: NodeFix | None) -> Diagnostic:
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
            + (f"; it gets there {how}" if how else ""),
            self.qualname,
            span(arg.node),  # type: ignore[arg-type]
            fix=fix,
        )


# ---- the fix: the padded count under FULL graphs, the real one otherwise ----------------------------------


def full_or_real_fix(
    ctx: RuleContext, function: ast.FunctionDef | ast.AsyncFunctionDef, arg: Passed, item: Item
) -> NodeFix | None:
    """Rewrite the argument to `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`, what the
    shared helper of upstream's fix decides. Offered where the padded count is read from a descriptor in this
    function (so the descriptor is in scope) and the pack names a real count that is (`real_counts`, or
    `int(<array>[-1])` of a `real_count_arrays` array reached from a parameter); unsafe, since which count is
    the real one is the pack's guess by name."""
    pad = ctx.pack.padding
    if arg.star or not (pad.mode_attribute and pad.full_mode and pad.mode_enum):
        return None
    read = next((n for n in ast.walk(function) if isinstance(n, ast.Attribute) and span(n) == item.span), None)
    descriptor = dotted(read.value) if read is not None else None
    value = arg.node.value if isinstance(arg.node, ast.keyword) else arg.node
    real, enum = _real_count(ctx, function, value), _mode_enum(ctx, pad.mode_enum)
    padded = ast.get_source_segment(ctx.text, value) if isinstance(value, ast.expr) else None
    if descriptor is None or real is None or enum is None or padded is None:
        return None
    if isinstance(value, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
        padded = f"({padded})"
    name, import_edit = enum
    rewritten = f"{padded} if {descriptor}.{pad.mode_attribute} == {name}.{pad.full_mode} else {real}"
    return NodeFix(
        "unsafe",
        f"Pass `{padded}` only under FULL CUDA graphs and the real count `{real}` otherwise",
        (),
        (replace_node(ctx.text, value, rewritten), *import_edit),  # type: ignore[arg-type]
    )


def _real_count(ctx: RuleContext, function: ast.FunctionDef | ast.AsyncFunctionDef, use: ast.AST) -> str | None:
    """The real query token count the pack names, if this function has one where `use` is: a parameter, a local
    assigned at the function's top level before it, or `int(<array>[-1])` of an array reached from a parameter."""
    pad = ctx.pack.padding
    params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    assigned = {
        t.id
        for stmt in function.body
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.lineno < use.lineno  # type: ignore[attr-defined]
        for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(t, ast.Name)
    }
    for name in pad.real_counts:
        if name in params or name in assigned:
            return name
    for node in ast.walk(function):
        text = dotted(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if text and text.rpartition(".")[2] in pad.real_count_arrays and text.partition(".")[0] in params:
            return f"int({text}[-1])"
    return None


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

            def propose_block(self, num_reqs, num_query_tokens):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_query_tokens)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=d.num_tokens,  # SG103
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
        "Unsafe: the argument becomes `<padded> if <descriptor>.cg_mode == CUDAGraphMode.FULL else <real count>`, "
        "the choice upstream's shared helper makes, and `CUDAGraphMode` is imported where the module lacks it. "
        "Offered where the padded count is read from a descriptor in the flagged function (so the descriptor is "
        "in scope) and a real query token count is too: a local assigned before the call or a parameter with a "
        "name the pack lists (`[padding] real_counts`, DFlash's `num_query_tokens`), or `int(<array>[-1])` of a "
        "host array of query offsets the pack lists (`real_count_arrays`, `query_start_loc_np`) reached from a "
        "parameter. A count from a helper, a container or `**kwargs`, or a function with no real count (the "
        "autoregressive decode steps) keeps its finding without a fix. It is unsafe because the real count is "
        "recognised by its name, and the better fix, moving to the shared helper that decides, needs a person."
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

            def propose_block(self, num_reqs, num_query_tokens):
                d, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_query_tokens)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=d.num_tokens if d.cg_mode == CUDAGraphMode.FULL else num_query_tokens,  # SG103
                )
    """,
)

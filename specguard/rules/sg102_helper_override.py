"""SG102 helper-override: a speculator subclass overrides a shared metadata helper."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import libcst as cst

from specguard.file_facts import FileFacts
from specguard.fix_model import NodeFix
from specguard.fixes.cst_edits import delete_statement
from specguard.packs import Pack
from specguard.program.cst_tools import dotted, kids, parameters, scopes
from specguard.program.signatures import Signature
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext


def _overrides_a_helper(facts: FileFacts, pack: Pack, mentions: frozenset[str]) -> bool:
    """A speculator subclass of the file defines a shared helper (from the summary: no parse needed to know)."""
    return bool(facts.helper_overrides)


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    helpers = ctx.pack.speculators.shared_helpers
    for scope in scopes(ctx.module):
        cls = scope.class_name
        if cls is None or cls not in ctx.facts.speculator_classes or cls in ctx.facts.base_classes:
            continue
        base = ctx.facts.overridden_signature(f"{cls}.{scope.name}")
        observers = set(ctx.pack.speculators.observer_decorators)
        if scope.name in helpers and not _observes_only(scope.function, base, observers):
            message = (
                f"speculator `{cls}` overrides the shared metadata helper `{scope.name}`; pass what differs "
                f"as arguments to the base helper instead of overriding it"
            )
            problems = forward_problems(scope.function)
            if problems:
                message += f"; no fix offered: the override is not a pure forward ({'; '.join(problems[:2])})"
            fix = None
            if not problems:
                same = base is not None and binds_alike(scope.function, base)
                what = f"Delete `{scope.qualname}`, which only forwards its arguments to the base helper"
                if not same:
                    what += " (unsafe: the base's parameters are not known to be the same, so a call may bind apart)"
                fix = NodeFix(
                    "safe" if same else "unsafe", what, (delete_statement(ctx.module, scope.function, ctx.holders),)
                )
            yield Diagnostic(scope.function.name, message, scope.qualname, fix=fix)


def binds_alike(function: cst.FunctionDef, base: Signature) -> bool:
    """Whether every call that binds on the override (a pure forward) binds the same way on the base helper,
    so deleting the override changes no call that worked: each parameter a caller may name reaches a base
    parameter of that name that takes a keyword, each one a caller passes by position reaches the base's
    parameter at that position. What `*args` and `**kwargs` forward lands on the base as it would directly."""
    p = function.params
    kinds = [(q.name.value, True) for q in p.posonly_params] + [(q.name.value, False) for q in p.params]
    own = kinds[1:]  # without `self`
    theirs = base.positional[1:] if base.bound else base.positional
    positional_only = set(base.positional[: base.positional_only])
    if len(own) > len(theirs):
        return False
    for (name, only_by_position), base_name in zip(own, theirs, strict=False):
        if not only_by_position and (name != base_name or base_name in positional_only):
            return False
    keywords = (set(theirs[len(own) :]) - positional_only) | set(base.keyword_only)
    return all(k.name.value in keywords or base.starstar for k in p.kwonly_params)


# ---- is the override a wrapper that cannot change what is built? --------------------------------------------


def _observes_only(function: cst.FunctionDef, base: Signature | None, decorators: set[str] = frozenset()) -> bool:
    """An override that extends the helper without changing what it builds: it assigns the result of
    `super().<same name>(...)`, called with each of its own parameters unchanged, to a local that it alone
    assigns, returns that local (or the call) on every `return` and ends in one (inside a `with` too), never
    assigns a parameter, gives none a default the base does not give it and raises nothing. What it does
    besides (records, logs, asserts on its arguments, reads the result) cannot change the metadata: an assertion
    refuses loudly, it builds nothing else. A pure forward is not one: it is flagged with a fix that deletes it.
    Its decorators, if any, are `decorators` (the pack's, which change how it runs, not what it returns)."""
    statements = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    known = decorators | {d.rpartition(".")[2] for d in decorators}  # `@torch.no_grad()` or `@no_grad()`
    written = [d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator for d in function.decorators]
    named = {dotted(d) for d in written}
    if forward_problems(function) == [] or not named <= known or function.asynchronous is not None:
        return False
    if not _defaults_agree(function, base) or not _ends_in_return(statements):
        return False
    if len(statements) == 1 and isinstance(statements[0], cst.SimpleStatementLine) and len(statements[0].body) == 1:
        return False  # nothing besides the forward: dead code, however its signature is written
    params = {p.name.value for p in parameters(function)}
    stored: dict[str, list[cst.BaseExpression]] = {}
    returns: list[cst.BaseExpression | None] = []
    for node in _nodes(statements):
        if _mutates(node, params):
            return False  # an argument changed in place (`kwargs["step"] = ...`, `kwargs.update(...)`)
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    stored.setdefault(target.target.value, []).append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            stored.setdefault(node.target.value, []).append(node.value)  # type: ignore[arg-type]
        elif isinstance(node, cst.Return):
            returns.append(node.value)
        elif isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Raise)):
            return False  # code of its own, or an exception a caller may catch and build otherwise
    if params & stored.keys() or not returns:
        return False

    def forwards(value: cst.BaseExpression | None) -> bool:
        if isinstance(value, cst.Call) and _is_super_call(value) and _called_method(value) == function.name.value:
            return not _argument_problems(function, _spread_locals(value, stored, statements))
        if isinstance(value, cst.Name) and len(stored.get(value.value, [])) == 1:
            return forwards(stored[value.value][0])
        return False

    return all(forwards(value) for value in returns)


def _spread_locals(
    call: cst.Call, stored: dict[str, list[cst.BaseExpression]], statements: list[cst.BaseStatement]
) -> cst.Call:
    """`call` with each `**name` of a local assigned once, to `dict(k=v, ...)` or `{"k": v, ...}`, and never changed
    in place, written as the keywords it holds: what the call passes, however the dict was spelled."""
    args: list[cst.Arg] = []
    for arg in call.args:
        name = arg.value.value if arg.star == "**" and isinstance(arg.value, cst.Name) else None
        items = _dict_items(stored[name][0]) if name in stored and len(stored[name]) == 1 else None
        if items is None or any(_mutates(node, {name}) for node in _nodes(statements)):  # type: ignore[arg-type]
            args.append(arg)
        else:
            args += [cst.Arg(value, keyword=cst.Name(key)) for key, value in items]
    return call.with_changes(args=args)


def _dict_items(value: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]] | None:
    """The (key, value) pairs of `dict(k=v, ...)` or of a dict display with string keys; None for anything else."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if all(arg.keyword is not None and not arg.star for arg in value.args):
            return [(arg.keyword.value, arg.value) for arg in value.args]  # type: ignore[union-attr]
        return None
    if isinstance(value, cst.Dict):
        items = []
        for element in value.elements:
            key = element.key if isinstance(element, cst.DictElement) else None
            if not isinstance(key, cst.SimpleString) or not key.evaluated_value.isidentifier():  # type: ignore[union-attr]
                return None
            items.append((str(key.evaluated_value), element.value))
        return items
    return None


def _defaults_agree(function: cst.FunctionDef, base: Signature | None) -> bool:
    """Each default the override gives is a constant the base helper gives that parameter too."""
    for param in parameters(function):
        if param.default is None:
            continue
        try:
            value = repr(ast.literal_eval(cst.Module([]).code_for_node(param.default)))
        except (ValueError, SyntaxError, TypeError):
            return False
        if base is None or base.default(param.name.value) != value:
            return False
    return True


_MUTATORS = frozenset({"update", "pop", "popitem", "setdefault", "clear", "append", "extend", "insert", "remove"})


def _mutates(node: cst.CSTNode, params: set[str]) -> bool:
    """An item or attribute of a parameter assigned or deleted, or a mutating method of one called."""
    targets: list[cst.BaseExpression] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.Del)):
        targets = [node.target]
    elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _MUTATORS:
        targets = [node.func]
    for target in targets:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            root: cst.BaseExpression = target
            while isinstance(root, (cst.Subscript, cst.Attribute)):
                root = root.value
            if isinstance(root, cst.Name) and root.value in params and root.value != "self":
                return True
    return False


def _ends_in_return(statements: list[cst.BaseStatement]) -> bool:
    """No path falls off the end (and returns None): the last statement returns, or is a `with` (of context
    managers that let exceptions through), or a `try` with only a `finally`, whose body does."""
    last = statements[-1] if statements else None
    if isinstance(last, cst.With) and isinstance(last.body, cst.IndentedBlock):
        return not any(_suppresses(item.item) for item in last.items) and _ends_in_return(list(last.body.body))
    plain_try = isinstance(last, cst.Try) and not last.handlers and last.orelse is None
    if plain_try and isinstance(last.body, cst.IndentedBlock):  # type: ignore[union-attr]
        return _ends_in_return(list(last.body.body))  # type: ignore[union-attr]
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)


def _suppresses(manager: cst.BaseExpression) -> bool:
    """`contextlib.suppress(...)`: what the body raises is swallowed, and the function goes on past the `with`."""
    called = manager.func if isinstance(manager, cst.Call) else manager
    return (dotted(called) or "").rpartition(".")[2] == "suppress"


def _nodes(statements: list[cst.BaseStatement]) -> Iterator[cst.CSTNode]:
    todo: list[cst.CSTNode] = list(statements)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(kids(node))


# ---- is the override a pure forward? -----------------------------------------------------------------------


def forward_problems(function: cst.FunctionDef) -> list[str]:
    """Why deleting this override could change what runs; empty when its body only returns
    `super().<same name>(...)` with each of its own parameters passed on unchanged."""
    name = function.name.value
    statements = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    if statements and _is_docstring(statements[0]):
        statements = statements[1:]
    forward = next((c for c in map(_super_forward, statements) if c is not None), None)
    problems = []
    others = [s for s in statements if _super_forward(s) is None]
    if forward is None:
        problems.append(f"it does not return `super().{name}(...)`")
    elif _called_method(forward) != name:
        problems.append(f"it returns `super().{_called_method(forward)}(...)`, another method")
    if others:
        problems.append("it also " + " and ".join(_describe(s) for s in others[:2]))
    if forward is not None:
        problems.extend(_argument_problems(function, forward))
    with_defaults = [p.name.value for p in parameters(function)[1:] if p.default is not None]
    if with_defaults:
        problems.append(f"it gives {_names(with_defaults)} defaults of its own, which may differ from the base's")
    if function.decorators:
        decorator = function.decorators[0].decorator
        name = dotted(decorator.func if isinstance(decorator, cst.Call) else decorator)
        problems.append(f"it is decorated with `@{name or '...'}`")
    if function.asynchronous is not None:
        problems.append("it is `async`")
    return problems


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _super_forward(stmt: cst.BaseStatement) -> cst.Call | None:
    """The call in `return super().m(...)` (or `super(Cls, self).m(...)`)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    ret = stmt.body[0]
    if not isinstance(ret, cst.Return) or not isinstance(ret.value, cst.Call):
        return None
    return ret.value if _is_super_call(ret.value) else None


def _is_super_call(call: cst.Call) -> bool:
    """`super().m(...)` (or `super(Cls, self).m(...)`)."""
    func = call.func
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and dotted(func.value.func) == "super"


def _called_method(call: cst.Call) -> str:
    return call.func.attr.value  # type: ignore[attr-defined]


def _describe(stmt: cst.BaseStatement) -> str:
    if isinstance(stmt, cst.If):
        return "runs an `if` that returns early" if _returns(stmt) else "runs an `if`"
    if isinstance(stmt, cst.SimpleStatementLine) and stmt.body:
        small = stmt.body[0]
        if isinstance(small, cst.Assert):
            return "asserts"
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            return "assigns a value"
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return f"calls `{dotted(small.value.func) or '...'}`"
        if isinstance(small, cst.Return):
            return "returns something else"
    return f"runs a `{type(stmt).__name__.lower()}` statement"


def _returns(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Return) or any(_returns(k) for k in kids(node))


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _argument_problems(function: cst.FunctionDef, call: cst.Call) -> list[str]:
    params = function.params
    positional = [p.name.value for p in [*params.posonly_params, *params.params][1:]]
    keywordable = {p.name.value for p in [*params.params, *params.kwonly_params]}
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
    kwarg = params.star_kwarg.name.value if params.star_kwarg is not None else None
    forwarded: list[str] = []
    problems: list[str] = []
    next_positional = iter(positional)
    for arg in call.args:
        value = arg.value.value if isinstance(arg.value, cst.Name) else None
        if arg.star == "*":
            expected = star
        elif arg.star == "**":
            expected = kwarg
        elif arg.keyword is None:
            expected = next(next_positional, None)
        else:
            expected = arg.keyword.value if arg.keyword.value in keywordable else None
        if expected is None or value != expected:
            shown = cst.Module([]).code_for_node(arg.value)
            where = f" for `{arg.keyword.value}`" if arg.keyword is not None else ""
            problems.append(f"it passes `{shown}`{where}")
        else:
            forwarded.append(value)
    missing = [p.name.value for p in parameters(function)[1:] if p.name.value not in forwarded]
    if missing:
        problems.append(f"it does not pass on {_names(missing)}")
    return problems


RULE = Rule(
    code="SG102",
    name="helper-override",
    title="speculator subclass overrides a shared metadata helper",
    summary=(
        "Flags a speculator subclass that overrides one of the shared metadata helpers defined by the "
        "speculator base (`_build_attn_metadata`, `_build_uniform_attn_metadata`, or the legacy "
        "`_build_draft_attn_metadata`). Classes that are not speculators may define methods of those names. An "
        "override that only observes the helper (it calls the base helper with each of its own arguments "
        "unchanged, with no default the base does not give, and returns that result on every path, inside a "
        "`with` or not; recording, logging or asserting on its arguments besides) is not flagged: it cannot "
        "change what is built, and an assertion refuses loudly. One that raises, or falls off its end (a "
        "`with contextlib.suppress(...)` lets it), is; so is one under a decorator the pack does not name as "
        "leaving the result as it is (`[speculators] observer_decorators`: `torch.inference_mode`, `torch.no_grad`)."
    ),
    why=(
        "The shared helper is the single place that decides the token count (padded for FULL CUDA graphs, real "
        "otherwise) and recomputes DCP rank-local lengths. vLLM 0.28.0's DFlash override of "
        "`_build_draft_attn_metadata` forwarded the caller's DP-padded count and made DFlash crash at startup "
        "with DP>1; the fix deleted the override."
    ),
    bad="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def _build_draft_attn_metadata(self, num_reqs, num_reqs_padded, num_tokens_padded, **kwargs):
                return super()._build_draft_attn_metadata(num_reqs, num_reqs_padded, num_tokens_padded, **kwargs)
    """,
    good="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return self._build_uniform_attn_metadata(
                    num_reqs=num_reqs, batch_desc=batch_desc, num_query_per_req=self.num_query_per_req,
                    seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound, step=1,
                )
    """,
    check=check,
    applies=_overrides_a_helper,
    limits=(
        Limit(
            "Only a method defined in the class body is an override: a helper name bound to another function by "
            "assignment is not flagged.",
            missed="""
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                def my_builder(self, num_reqs, num_tokens_padded):
                    return None

                class MyDFlashSpeculator(DraftModelSpeculator):
                    _build_attn_metadata = my_builder
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#56181 ("Fix DP token padding in dflash attention metadata", in vLLM 0.30.0): deletes '
        "`DFlashSpeculator._build_draft_attn_metadata`, which vLLM 0.28.0 and 0.29.0 define in "
        "`vllm/v1/worker/gpu/spec_decode/dflash/speculator.py`.",
    ),
    fix_availability="sometimes",
    fix_summary=(
        "Offered only for an override that is a pure forward: its body only returns `super().<same helper>(...)`,"
        " passing each of its own parameters on unchanged (positionally in order, as `name=name`, `*args`, "
        "`**kwargs`), and it has no defaults of its own, no decorator and no other statement. The fix deletes the"
        " override, so the base helper runs with the same arguments. Safe where the base helper's definition is "
        "in the project (or installed) and every call that binds on the override binds the same way on it: each "
        "parameter a caller may name is a base parameter of that name that takes a keyword, each one passed by "
        "position lands at the same position. Unsafe otherwise, since a caller naming a parameter the base calls "
        "differently would then fail. Any other override keeps its finding without a fix, and the message says "
        "why (vLLM 0.28.0's DFlash override returns early and passes `self.num_query_per_req`, so its removal "
        "needs a person)."
    ),
    fixed="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            pass
    """,
)

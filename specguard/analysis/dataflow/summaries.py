"""Stage one: a summary per function of a module, computed once with the module's `ast` and cached with its scan.

A summary says, in terms of the function's own parameters, what it returns and what it writes into instance
attributes: "the `num_tokens` of whatever descriptor is passed as `d`", "whatever is passed as `n`", "the result
of `self._padded(...)` with these arguments", "what `self.padded` holds". Calls and attribute reads stay
symbolic here, because their targets may live in other files; `resolve` follows them once the project index
exists.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from specguard.analysis.ast_tools import FUNCTIONS, callee_text, defaults, is_bound_method, module_function
from specguard.analysis.dataflow.calls import Passed
from specguard.analysis.dataflow.values import (
    ATTR,
    CALL,
    Arg,
    CallFlow,
    FlowSpec,
    FunctionFlow,
    Item,
    Signature,
    Value,
    items_of,
    value_of,
)
from specguard.analysis.dataflow.walker import FlowWalker, Hooks, parameter_env


def signature(func: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> Signature:
    a = func.args
    return Signature(
        positional=tuple(p.arg for p in (*a.posonlyargs, *a.args)),
        keyword_only=tuple(p.arg for p in a.kwonlyargs),
        star=a.vararg.arg if a.vararg else None,
        starstar=a.kwarg.arg if a.kwarg else None,
        bound=bound,
        defaults=tuple((p.arg, repr(d.value)) for p, d in defaults(a) if _constant(d)),  # type: ignore[attr-defined]
        positional_only=len(a.posonlyargs),
    )


def _constant(default: ast.expr | None) -> bool:
    """A default whose `repr` is its source: None, a bool or an int (what a count or a switch defaults to)."""
    return isinstance(default, ast.Constant) and (default.value is None or isinstance(default.value, (bool, int)))


class _Recorder(Hooks):
    """Summary-mode answers: calls and `self` attributes become symbolic items, recorded for later."""

    def __init__(
        self, spec: FlowSpec, resolve: Callable[[str], str], imported: frozenset[str], local: frozenset[str]
    ) -> None:
        self.spec = spec
        self.resolve = resolve
        self.imported = imported  # local names bound by imports: a dotted call through one reaches a function
        self.local = local  # module-level functions of this module
        self.self_name: str | None = None
        self.calls: list[tuple[str, list[Passed], int]] = []  # (callee as written, arguments, line)
        self.internal: list[bool] = []  # a method of the class or a function of the module
        self.tracked: list[bool] = []  # passes a value the function tracks itself, or such a call's result

    def _passes_tracked(self, args: list[Passed]) -> bool:
        for arg in args:
            for item in arg.value.values():
                if item.label in self.spec.carried:
                    return True
                if item.label == CALL:
                    index = int(item.origin[1:])
                    if self.internal[index] or self.tracked[index]:
                        return True
        return False

    def callee(self, func: ast.expr) -> str | None:
        return module_function(func, self.self_name, self.imported, self.resolve)

    def call(self, node: ast.Call, args: list[Passed]) -> Value | None:
        text = callee_text(node.func, self.self_name)
        if text is None:
            return None
        head = text.partition(".")[0]
        internal = text.startswith(("self.", "super().")) or ("." not in text and text in self.local)
        if not internal and head not in self.imported:
            return None  # a builtin, or a method of some local object
        index = len(self.calls)
        self.calls.append((text, args, node.lineno))
        self.internal.append(internal)
        self.tracked.append(self._passes_tracked(args))
        return value_of([Item(CALL, f"#{index}", None, text)])

    def self_attribute(self, name: str) -> Value:
        return value_of([Item(ATTR, name, None, f"`self.{name}`")])


def _referenced(items: Iterable[Item]) -> set[int]:
    return {int(i.origin[1:]) for i in items if i.label == CALL}


def _kept_calls(recorder: _Recorder, roots: list[Item]) -> dict[int, int]:
    """old index -> (new index, keep its arguments) for the calls worth keeping: those whose result is used
    (returned, stored in an attribute, passed on to a kept call), with their arguments; and, as bare names
    (once each), the calls a rule checking this function may ask about: every call within the class or the
    module, and calls of imported functions that pass a value the function tracks itself (a descriptor, its
    padded count)."""
    used: set[int] = set()
    todo = list(_referenced(roots))
    while todo:
        index = todo.pop()
        used.add(index)
        for arg in recorder.calls[index][1]:
            todo.extend(_referenced(arg.value.values()) - used)
    named: dict[str, int] = {}
    for index, (text, _, _) in enumerate(recorder.calls):
        if index not in used and (recorder.internal[index] or recorder.tracked[index]):
            named.setdefault(text, index)
    return {old: (new, old in used) for new, old in enumerate(sorted(used | set(named.values())))}


def _renumber(items: tuple[Item, ...], numbers: dict[int, tuple[int, bool]]) -> tuple[Item, ...]:
    out = []
    for item in items:
        if item.label != CALL:
            out.append(item)
        elif int(item.origin[1:]) in numbers:
            number = numbers[int(item.origin[1:])][0]
            out.append(Item(CALL, f"#{number}", item.key, item.source, item.steps, item.span))
    return tuple(out)


def function_flow(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    class_name: str | None,
    spec: FlowSpec,
    recorder: _Recorder,
) -> FunctionFlow | None:
    """The function's summary; None when it returns, stores and passes on nothing tracked (and is no sink)."""
    qualname = f"{class_name}.{func.name}" if class_name else func.name
    bound = is_bound_method(class_name, func)
    sig = signature(func, bound)
    env, intrinsic = parameter_env(func, spec, symbolic=True, bound=bound)
    recorder.self_name = sig.positional[0] if bound and sig.positional else None
    recorder.calls, recorder.internal, recorder.tracked = [], [], []
    walker = FlowWalker(spec, recorder, self_name=recorder.self_name, qualname=qualname)
    try:
        walker.run(func, env)
    except RecursionError:  # nested too deep to follow: the function gets no summary, the run goes on
        return FunctionFlow(qualname, sig, intrinsic)
    returns = items_of(walker.returns)
    attributes = [(name, items_of(value)) for name, value in sorted(walker.attributes.items())]
    numbers = _kept_calls(recorder, [*returns, *(i for _, items in attributes for i in items)])
    calls = tuple(
        CallFlow(
            text,
            tuple(Arg(_renumber(items_of(a.value), numbers), a.keyword, a.star) for a in args) if used else (),
            line,
            recorder.tracked[index],
        )
        for index, (text, args, line) in enumerate(recorder.calls)
        if index in numbers
        for used in [numbers[index][1]]
    )
    if not (returns or attributes or calls or func.name in spec.sinks):
        return None
    return FunctionFlow(
        qualname,
        sig,
        intrinsic,
        _renumber(returns, numbers),
        tuple((name, _renumber(items, numbers)) for name, items in attributes),
        calls,
    )


def module_flows(
    statements: Iterable[ast.stmt], spec: FlowSpec, resolve: Callable[[str], str], imported: Iterable[str]
) -> dict[str, FunctionFlow | None]:
    """Summaries of the module-level functions ("name") and the methods of module-level classes ("Cls.name");
    None for a function with nothing to say (it still hides a base class's method of the same name)."""
    statements = list(statements)
    local = frozenset(s.name for s in statements if isinstance(s, FUNCTIONS))
    recorder = _Recorder(spec, resolve, frozenset(imported), local)
    out: dict[str, FunctionFlow | None] = {}
    for stmt in statements:
        if isinstance(stmt, FUNCTIONS):
            out[stmt.name] = function_flow(stmt, None, spec, recorder)
        elif isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(item, FUNCTIONS):
                    out[f"{stmt.name}.{item.name}"] = function_flow(item, stmt.name, spec, recorder)
    return out

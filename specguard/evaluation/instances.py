"""What an instance attribute may hold when the evaluation reads it without having written it: the join of what
every method of the class's lineage writes into `self.<attr>`, each method evaluated on its own with unknown
arguments. Computed the first time an evaluation reads the attribute, once per class, attribute and client
state (a CUDA-graph mode), and never through itself: an attribute written from itself reads as unknown there."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from specguard.evaluation.paths import join_values
from specguard.evaluation.values import UNKNOWN, Function, Obj, OneOf, plain, settled, traced
from specguard.program.ast_tools import cached_on, walked
from specguard.program.tree import ClassInfo, SourceTree

Evaluate = Callable[[Function, Obj, "dict | None"], list[tuple[Any, dict[tuple[Any, str], Any]]]]


def writers(
    cls: ClassInfo, tree: SourceTree, attr: str
) -> list[tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The methods of the lineage that assign `self.<attr>` (to their first parameter's attribute)."""
    found = []
    for klass in tree.ancestors(cls):
        for method in klass.methods.values():
            if attr in assigned_on_self(method):
                found.append((klass, method))
    return found


def _effective_writers(
    cls: ClassInfo, tree: SourceTree, attr: str
) -> list[tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The writers an instance of `cls` meets: of the constructors, only the one that runs (the nearest
    `__init__`), whose evaluation carries, in order, what the ones it calls through `super()` write and what its
    own private helpers write with the arguments it passes (`self._init_policy(True)`); and every other method."""
    found = writers(cls, tree, attr)
    constructor = next((klass for klass in tree.ancestors(cls) if "__init__" in klass.methods), None)
    if constructor is None:
        return found
    init = constructor.methods["__init__"]
    helpers = _private_calls(init)
    during = [(klass, method) for klass, method in found if method.name == "__init__" or method.name in helpers]
    if not during:
        return found
    return [(constructor, init), *((klass, method) for klass, method in found if (klass, method) not in during)]


def _private_calls(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The private methods (`_name`) a method calls on its own instance: part of what it does, run with the
    arguments it passes, not on their own."""
    return cached_on(method, "private_calls", _read_private_calls)  # type: ignore[no-any-return]


def _read_private_calls(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    me = _instance(method)
    return frozenset(
        node.func.attr
        for node in walked(method)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == me
        and node.func.attr.startswith("_")
        and not node.func.attr.startswith("__")
    )


def assigned_on_self(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The attributes a method assigns on its instance (tuple targets unpacked), read once per method."""
    return cached_on(method, "assigned", _self_attributes)  # type: ignore[no-any-return]


def _instance(method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name a method calls its instance by (its first parameter)."""
    params = [*method.args.posonlyargs, *method.args.args]
    return params[0].arg if params else None


def _self_attributes(method: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    me = _instance(method)
    return frozenset(
        target.attr
        for node in walked(method)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for target in _flat(node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me
    )


def _flat(targets: list[ast.expr]) -> list[ast.expr]:
    """Assignment targets with tuples unpacked: `self.a, (self.b, *self.c) = ...` assigns a, b and c."""
    out: list[ast.expr] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            out.extend(_flat(target.elts))
        else:
            out.append(target.value if isinstance(target, ast.Starred) else target)
    return out


class InstanceAttributes:
    """Per (class, attribute, key): the joined value its writers give it. Each writer runs once per (class, key),
    and what it leaves in every attribute is kept: reading a second attribute it writes costs nothing. While an
    attribute is being computed it reads as unknown; a writer that read one so (an attribute written from itself,
    directly or through others) runs a second time after the first, as a second call would, on what the first
    left: so `self.total = self.total + n` still carries what `n` carries."""

    def __init__(self, tree: SourceTree, constructed: bool = False) -> None:
        self.tree = tree
        # whether an attribute holds what the constructor that runs leaves (see `_effective_writers`), or the join
        # of what every constructor and helper of the lineage writes, each run on its own
        self.constructed = constructed
        self._values: dict[tuple[Any, ...], Any] = {}
        self._runs: dict[tuple[Any, ...], list[tuple[dict[str, Any], dict[str, int]]]] = {}
        self._computing: set[tuple[Any, ...]] = set()
        self._running: set[tuple[Any, ...]] = set()
        self._cycles = 0  # reads of an attribute (or a writer) still being computed

    def value(
        self, cls: ClassInfo, attr: str, key: Any, evaluate: Evaluate, traced_kinds: frozenset[str] = frozenset()
    ) -> Any:
        """`evaluate(function, self_object, writes)` runs a writer (starting from `writes`, the instance's state of
        an earlier call, or none) and gives its end states' (value, writes) pairs."""
        ident = (cls.key, attr, key)
        if ident in self._values:
            return self._values[ident]
        if ident in self._computing:
            self._cycles += 1
            return UNKNOWN
        self._computing.add(ident)
        try:
            options = []
            chosen = _effective_writers if self.constructed else writers
            for klass, method in chosen(cls, self.tree, attr):
                for written, line in self._run(cls, klass, method, key, evaluate):
                    if attr in written:
                        hop = f"`self.{attr}`, set in `{klass.name}.{method.name}` (line {line.get(attr, 0)})"
                        options.append((traced(settled(written[attr]), hop, traced_kinds), frozenset()))
            value = join_values(options) if options else UNKNOWN
            _hold(value)
        finally:
            self._computing.discard(ident)
        self._values[ident] = value
        return value

    def _run(
        self, cls: ClassInfo, klass: ClassInfo, method: Any, key: Any, evaluate: Evaluate
    ) -> list[tuple[dict[str, Any], dict[str, int]]]:
        """(what each end state wrote into the instance's attributes, the line of each write)."""
        ident = (cls.key, klass.key, method.name, key)
        if ident in self._running:
            self._cycles += 1
            return []
        if ident not in self._runs:
            self._running.add(ident)
            try:
                self._runs[ident] = self._ends(cls, klass, method, evaluate)
            finally:
                self._running.discard(ident)
        return self._runs[ident]

    def _ends(
        self, cls: ClassInfo, klass: ClassInfo, method: Any, evaluate: Evaluate
    ) -> list[tuple[dict[str, Any], dict[str, int]]]:
        module = self.tree.module(klass.module)
        if module is None:
            return []
        me = Obj(cls, label="self")
        function = Function(module, method, klass)
        cycles = self._cycles
        ends = evaluate(function, me, None)
        if self._cycles != cycles:  # it read its own attributes before writing them: run it again after itself
            first = join_writes([writes for _, writes in ends])
            ends = ends + evaluate(function, me, first)
        lines = {attr: getattr(node, "lineno", 0) for attr, node in me.nodes.items()}
        return [
            ({attr: value for (owner, attr), value in writes.items() if owner == id(me)}, lines) for _, writes in ends
        ]


def join_writes(ends: list[dict[tuple[Any, str], Any]]) -> dict[tuple[Any, str], Any]:
    keys = set().union(*ends) if ends else set()
    return {key: join_values([(writes.get(key, UNKNOWN), frozenset()) for writes in ends]) for key in keys}


def _hold(value: Any) -> None:
    """Objects of the tree's classes that an attribute holds: their fields may change through their own methods."""
    for option in value.options if isinstance(value, OneOf) else (value,):
        option = plain(option)
        if isinstance(option, Obj) and option.cls is not None and option.label != "self":
            option.held = True

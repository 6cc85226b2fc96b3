"""Small libcst helpers shared by the rules on libcst: names, scopes and calls (the others run on the evaluator)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

# Fields that hold only whitespace, comments or punctuation: never a name, call or assignment a rule looks for.
_TRIVIA = (
    "whitespace",
    "lpar",
    "rpar",
    "comma",
    "semicolon",
    "leading_lines",
    "lines_after_decorators",
    "header",
    "footer",
    "newline",
    "colon",
    "equal",
    "dot",
    "star",
    "lbracket",
    "rbracket",
    "lbrace",
    "rbrace",
    "operator",
    "asynchronous",
    "lines_after",
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def kids(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`kids(node)` without the trivia, read straight off the dataclass fields.

    libcst computes `.children` with a visitor pass per node, which made walking a 1,000-line speculator module
    several times per rule the slowest step of a run; this is an order of magnitude cheaper.
    """
    names = _FIELDS.get(type(node))
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node) if not f.name.startswith(_TRIVIA))
        _FIELDS[type(node)] = names
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, cst.CSTNode))
    return out


def top_statements(module: cst.Module) -> dict[int, cst.BaseStatement]:
    """The id of every node of `module` -> the statement of `module.body` that holds it (is it or contains it): one
    walk of the module, for every node a file's rules and fixes ask about (a walk each was quadratic in its size)."""
    index: dict[int, cst.BaseStatement] = {}
    for stmt in module.body:
        stack: list[cst.CSTNode] = [stmt]
        while stack:
            current = stack.pop()
            index[id(current)] = stmt
            stack.extend(kids(current))
    return index


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain; None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def last_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def is_self_call(call: cst.Call) -> bool:
    """`self.x(...)`, `cls.x(...)` or `super().x(...)`: a call of a method on the class hierarchy."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    owner = func.value
    if isinstance(owner, cst.Name):
        return owner.value in ("self", "cls")
    return isinstance(owner, cst.Call) and isinstance(owner.func, cst.Name) and owner.func.value == "super"


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


@dataclass(frozen=True)
class Scope:
    class_name: str | None
    function: cst.FunctionDef

    @property
    def name(self) -> str:
        return self.function.name.value

    @property
    def qualname(self) -> str:
        return f"{self.class_name}.{self.name}" if self.class_name else self.name


def scopes(module: cst.Module) -> Iterator[Scope]:
    """Every function that is not nested in another: module-level functions and the methods of classes at any
    depth (under `if`/`try`, nested in a class or a function), with the class's `__qualname__`. A function
    nested in a function is part of it (its calls are the outer function's); a class nested in one is not."""
    yield from _scopes(module.body, None, "", methods=True)


def _scopes(body: Sequence[cst.BaseStatement], class_name: str | None, prefix: str, methods: bool) -> Iterator[Scope]:
    for stmt in _same_scope(body):
        if isinstance(stmt, cst.FunctionDef):
            if methods:
                yield Scope(class_name, stmt)
            inner = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
            yield from _scopes(inner, None, f"{prefix}{stmt.name.value}.<locals>.", methods=False)
        elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            qualname = prefix + stmt.name.value
            yield from _scopes(stmt.body.body, qualname, qualname + ".", methods=True)


def _same_scope(body: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseStatement]:
    """The statements of one scope, looking through `if`/`try`/`with`/loops/`match`, not into defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            for block in _blocks(stmt):
                yield from _same_scope(block)


def _blocks(node: cst.CSTNode) -> Iterator[Sequence[cst.BaseStatement]]:
    for name in ("body", "orelse", "handlers", "finalbody", "cases"):
        value = getattr(node, name, None)
        for part in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(part, cst.IndentedBlock):
                yield part.body
            elif isinstance(part, cst.CSTNode) and not isinstance(part, cst.BaseSuite):
                yield from _blocks(part)  # elif, else, except, finally, case


def walk_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """Every call under `node`, nested functions included (not nested classes: see `scopes`), in source order."""
    if isinstance(node, cst.Call):
        yield node
    for child in kids(node):
        if not isinstance(child, cst.ClassDef):
            yield from walk_calls(child)


def parameters(function: cst.FunctionDef) -> list[cst.Param]:
    """Every parameter of a function in order: positional-only, positional, *args, keyword-only, **kwargs."""
    p = function.params
    star = [p.star_arg] if isinstance(p.star_arg, cst.Param) else []
    kwarg = [p.star_kwarg] if p.star_kwarg is not None else []
    return [*p.posonly_params, *p.params, *star, *p.kwonly_params, *kwarg]

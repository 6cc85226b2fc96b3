"""Which `except` clause catches a raise: the raised class's lineage (read from the tree for the source's own
exceptions, from a small table for Python's) against the names a handler lists."""

from __future__ import annotations

import ast
from typing import Any

from specguard.evaluation.paths import Outcome
from specguard.program.ast_tools import dotted
from specguard.program.tree import SourceTree, base_name

# Python's exceptions evaluated code raises, with their bases (all derive from Exception).
_BUILTIN_BASES = {
    "KeyError": ("LookupError",),
    "IndexError": ("LookupError",),
    "NotImplementedError": ("RuntimeError",),
    "RecursionError": ("RuntimeError",),
    "ModuleNotFoundError": ("ImportError",),
    "FileNotFoundError": ("OSError",),
    "UnicodeDecodeError": ("UnicodeError", "ValueError"),
    "UnicodeError": ("ValueError",),
    "ZeroDivisionError": ("ArithmeticError",),
    "OverflowError": ("ArithmeticError",),
    "ArgumentTypeError": (),
    "JSONDecodeError": ("ValueError",),  # json's
    "ValidationError": ("ValueError",),  # pydantic's
}
_EVERYTHING = {"Exception", "BaseException"}


def lineage(outcome: Outcome, tree: SourceTree) -> set[str] | None:
    """Names of the class a raise/assert outcome raises and of its bases; None where it is not known."""
    node = outcome.site.node
    if isinstance(node, ast.Assert):
        return python_lineage("AssertionError")
    if isinstance(node, ast.Subscript):  # an enum lookup by name
        return python_lineage("KeyError")
    return raised_by(node, outcome.site.module.name, tree)


def raised_by(node: ast.AST, module: str, tree: SourceTree) -> set[str] | None:
    """Names of the class a `raise` statement of `module` raises and of its bases; None where it is not known."""
    if not isinstance(node, ast.Raise) or node.exc is None:
        return None
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    name = dotted(exc)
    if name is None:
        return None
    short = name.rpartition(".")[2]
    if not short[:1].isupper():
        return None  # `raise err`: a value raised again, its class unknown here
    names = {short}
    cls = tree.resolve_class(module, name)
    if cls is not None:
        for klass in tree.ancestors(cls):
            names.add(klass.name)
            names.update((base_name(b) or "").rpartition(".")[2] for b in klass.bases)
    return _with_python_bases(names)


def python_lineage(name: str) -> set[str]:
    """One of Python's exceptions (what a known operation raises: ZeroDivisionError, KeyError) and its bases."""
    return _with_python_bases({name})


def _with_python_bases(names: set[str]) -> set[str]:
    frontier = list(names)
    while frontier:
        for base in _BUILTIN_BASES.get(frontier.pop(), ()):
            if base not in names:
                names.add(base)
                frontier.append(base)
    return names


def catches(handler: ast.ExceptHandler, raised: set[str] | None) -> Any:
    """True, False, or None (undecided) for whether `except <handler.type>` catches a class named by `raised`."""
    if handler.type is None:
        return True
    listed = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = [(dotted(t) or "").rpartition(".")[2] for t in listed]
    if any(n in _EVERYTHING for n in names):
        return True
    if not all(names) or raised is None:
        return None
    return bool(raised & set(names))

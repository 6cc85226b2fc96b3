"""What an annotation says a value is, where the evaluation knows nothing better: a container of unknown size of
what its element stands for, a dict of unknown keys of what its keys and values stand for, a tuple of what each
item stands for, and for a name what `leaf` makes of it (the evaluator: an instance of a class the tree defines;
a client: a descriptor, a mode). An annotation is a promise,
not a proof: what it yields is still unknown in value, only its kind is known."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from specguard.evaluation.values import NOT_HANDLED, UNKNOWN, Many, Mapping
from specguard.program.ast_tools import dotted

# Generic containers whose first parameter is the type of every element they hold (or yield).
_SEQUENCES = frozenset(
    {
        "list",
        "List",
        "Sequence",
        "MutableSequence",
        "Collection",
        "Iterable",
        "Iterator",
        "Generator",
        "set",
        "Set",
        "frozenset",
        "FrozenSet",
        "tuple",
        "Tuple",
    }
)
# Generic mappings: the first parameter is the type of every key, the second of every value.
_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "DefaultDict", "OrderedDict"})
_WRAPPERS = frozenset({"Optional", "Annotated", "Final"})  # the first parameter is the type


def annotated(annotation: ast.expr, leaf: Callable[[ast.expr], Any]) -> Any:
    """The value `annotation` stands for; NOT_HANDLED where it says nothing `leaf` knows. A union stands for its
    one side that says something (`X | None` is an X where it is used as one)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a forward reference
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return NOT_HANDLED
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotated(side, leaf) for side in (annotation.left, annotation.right)]
        said = [value for value in sides if value is not NOT_HANDLED]
        return said[0] if len(said) == 1 else NOT_HANDLED
    if isinstance(annotation, ast.Subscript):
        outer = (dotted(annotation.value) or "").rpartition(".")[2]
        inner = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if outer in ("tuple", "Tuple") and not any(isinstance(x, ast.Constant) for x in inner):
            items = [annotated(x, leaf) for x in inner]
            if all(item is NOT_HANDLED for item in items):
                return NOT_HANDLED
            return tuple(UNKNOWN if item is NOT_HANDLED else item for item in items)
        if outer in _SEQUENCES:
            element = annotated(inner[0], leaf)
            return Many(element) if element is not NOT_HANDLED else NOT_HANDLED
        if outer in _MAPPINGS and len(inner) == 2:
            key, value = (annotated(x, leaf) for x in inner)
            if key is NOT_HANDLED and value is NOT_HANDLED:
                return NOT_HANDLED
            return Mapping(UNKNOWN if key is NOT_HANDLED else key, UNKNOWN if value is NOT_HANDLED else value)
        if outer in _WRAPPERS:
            return annotated(inner[0], leaf)
        return NOT_HANDLED
    return leaf(annotation)

"""The values the evaluator computes with: plain Python values, UNKNOWN, and stand-ins for what the served source
defines (its classes, functions, enum members, config objects) or what lies outside it (builtins, libraries)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from specguard.deploy.flow.budget import Budget
from specguard.deploy.source import ClassInfo, ParsedModule


class _Unknown:
    """A value the serving config does not determine."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # a bug guard: three-valued logic must never fall back to Python truthiness
        raise TypeError("UNKNOWN has no truth value; use truth()")


UNKNOWN: Any = _Unknown()

NOT_HANDLED: Any = object()


@dataclass(eq=False)
class Obj:
    """An object whose attributes the evaluation knows (a config section, a metadata builder).

    `defaults`: a missing attribute falls back to the class-level value written in the source (a dataclass
    built from the user's JSON, a class's ClassVars); otherwise it is UNKNOWN (a config section vLLM fills in
    from many places).
    """

    cls: ClassInfo | None
    fields: dict[str, Any] = field(default_factory=dict)
    defaults: bool = False
    label: str = ""
    # Attributes the situation fixes: assignments to them in evaluated code are ignored (a builder built for
    # a draft layer stays a draft builder whatever its constructor computes from the layers).
    pinned: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<{self.label or (self.cls.name if self.cls else 'object')}>"


@dataclass(frozen=True)
class ClassRef:
    info: ClassInfo


@dataclass(frozen=True)
class EnumMember:
    cls: ClassInfo
    name: str

    def __repr__(self) -> str:
        return f"{self.cls.name}.{self.name}"


@dataclass(frozen=True, eq=False)
class Function:
    module: ParsedModule
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    owner: ClassInfo | None = None
    closure: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")


@dataclass(frozen=True, eq=False)
class Bound:
    func: Function
    self_value: Any


@dataclass(frozen=True)
class SuperRef:
    owner: ClassInfo
    self_value: Any


@dataclass(frozen=True)
class Opaque:
    """Something outside the tree or not modelled, known by name: `builtins.getattr`, `json.loads`, ..."""

    name: str


@dataclass(frozen=True)
class ModuleRef:
    name: str


@dataclass(frozen=True)
class LiteralType:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class PyMethod:
    """A whitelisted method of a plain Python value (str.replace, dict.pop, list.remove, ...)."""

    target: Any
    name: str


@dataclass(frozen=True, eq=False)
class Token:
    """A value a client of the evaluator stands in for (an argparse parser being filled); see `hook`."""

    kind: str


@dataclass(frozen=True, eq=False)
class TokenAttr:
    """`token.attr`: calling it goes to the hook."""

    token: Token
    attr: str


def known(value: Any, budget: Budget | None = None) -> bool:
    """A plain value with nothing unknown inside it (walked without recursion: nesting and cycles cost nothing
    more than their elements, which `budget` is charged for)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if item is UNKNOWN:
            return False
        if isinstance(item, (dict, list, tuple, set, frozenset)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if budget is not None:
                budget.spend(len(item) + 1)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                stack.extend(item)
    return True


def same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is UNKNOWN or b is UNKNOWN:
        return False
    if isinstance(a, (Obj, Function, Bound)) or isinstance(b, (Obj, Function, Bound)):
        return False
    try:
        return type(a) is type(b) and known(a) and known(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - comparing arbitrary evaluated values must not fail the evaluation
        return False

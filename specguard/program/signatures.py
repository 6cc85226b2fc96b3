"""A function's parameters as a caller binds to them: what SG102's fix compares (an override and the base helper it
forwards to) and what SG103's fix reads (where a call's arguments land, and the defaults of those it omits).

Plain data, so that it travels in a module's cached summary to the file's worker."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from specguard.program.ast_tools import defaults


@dataclass(frozen=True)
class Signature:
    positional: tuple[str, ...] = ()
    keyword_only: tuple[str, ...] = ()
    star: str | None = None
    starstar: str | None = None
    bound: bool = False  # a method reached through `self`/`cls`: its first positional parameter is not passed
    # (parameter, default) for the defaults that are constants (`1`, `None`, `True`), as source: what a fix
    # reads to know the value a call that omits the argument passes
    defaults: tuple[tuple[str, str], ...] = ()
    positional_only: int = 0  # how many of `positional` come before a `/`

    def default(self, parameter: str) -> str | None:
        return next((value for name, value in self.defaults if name == parameter), None)


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

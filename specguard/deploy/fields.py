"""A config-dataclass JSON value (`--kv-transfer-config`, `--compilation-config`) validated as vLLM's parser validates
it: vLLM hands it to pydantic (`TypeAdapter(cls).validate_json`), which checks every field against its type, runs
the field validators, then `__post_init__`.

The field types are read from the served source (`TypeReader`) and rebuilt as plain Python types (builtins,
`Literal`s with the source's values, unions, `list[int]`, an enum as the `Literal` of its members' values, a nested
config dataclass as a mapping), and pydantic itself checks the value against them, with the lax rules vLLM gets.
A field with a `before`/`wrap` validator in the source is left to that validator. `__post_init__` is run by the
static evaluator on the validated values; a raise it reaches whatever the undecided conditions are is vLLM's
refusal, with its text. Nothing of vLLM is imported.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Literal, Union

from specguard.deploy.arguments import Hint, TypeReader
from specguard.deploy.evaluator import config_evaluator
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.objects import PYTHON_TYPES
from specguard.evaluation.paths import verdict
from specguard.evaluation.values import NOT_HANDLED, ClassRef, EnumMember, Function, Obj, Token, known
from specguard.program.tree import ClassInfo, SourceTree, dotted

# Python's types by name, as an annotation writes them (`object` validates anything).
_BUILTINS: dict[str, Any] = {**PYTHON_TYPES, "frozenset": frozenset, "bytes": bytes, "object": Any}


class Refused(Exception):
    """vLLM's parser refuses the value; the message says why, as vLLM's validation does."""


class FieldTypes:
    """Python types for the fields of the served config dataclasses, for pydantic to validate JSON against."""

    def __init__(self, tree: SourceTree, reader: TypeReader) -> None:
        self.tree = tree
        self.reader = reader

    def check(self, cls: ClassInfo, value: dict[str, Any]) -> None:
        """Raises Refused for a field value pydantic refuses (fields with a before/wrap validator excepted)."""
        from pydantic import TypeAdapter, ValidationError

        before = field_validators(self.tree, cls)
        for name, annotation, owner in self.reader.fields(cls):
            if name not in value or not all(self._reaches_type(v, cls, value[name]) for v in before.get(name, [])):
                continue
            module = self.tree.module(owner.module)
            if module is None:
                continue
            pytype = self._pytype(self.reader.hints(annotation, module), 0)
            if pytype is Any:
                continue
            try:
                TypeAdapter(pytype).validate_json(json.dumps(value[name]))
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = "".join(f"[{p}]" for p in err.get("loc", ()))
                raise Refused(f"{cls.name}.{name}{where}: {err['msg']} (got {value[name]!r})") from None
            except (TypeError, ValueError):
                continue  # a type pydantic cannot build from what was read: not checked

    def _reaches_type(self, validator: tuple[str, ast.FunctionDef, ClassInfo], cls: ClassInfo, value: Any) -> bool:
        """Whether pydantic's own type check sees the value after this validator: a `wrap` validator that hands
        the value on (`return handler(value)`, evaluated for this value) does; a `before` one may change it."""
        mode, method, owner = validator
        module = self.tree.module(owner.module)
        if mode != "wrap" or module is None:
            return False
        handler = Token("handler")
        handed = Token("handed on")

        def hook(ev: Evaluator, func: Any, args: Any, kwargs: Any, *rest: Any) -> Any:
            return handed if func is handler else NOT_HANDLED

        ev = config_evaluator(self.tree, hook=hook)
        try:
            result, _ = ev.call_function(
                Function(module, method, owner), [value, handler], {}, self_value=ClassRef(cls)
            )
        except OutOfBudget:
            return False
        return result is handed

    def _pytype(self, hints: frozenset[Hint], depth: int) -> Any:
        parts: list[Any] = []
        for hint in hints:
            part = self._one(hint, depth)
            if part is Any:
                return Any
            parts.append(part)
        if not parts:
            return Any
        return parts[0] if len(parts) == 1 else Union[tuple(parts)]  # noqa: UP007 - built at run time

    def _one(self, hint: Hint, depth: int) -> Any:
        if depth > 6:
            return Any
        if hint.what == "none":
            return type(None)
        if hint.what == "builtin":
            return _BUILTINS.get(hint.name, Any)
        if hint.what == "literal":
            values = tuple(v for v in hint.values if isinstance(v, (str, int, bool)) or v is None)
            return Literal[values] if values and len(values) == len(hint.values) else Any  # type: ignore[valid-type]
        if hint.what == "generic":
            origin = _BUILTINS.get(hint.name)
            if origin in (None, Any, object):
                return Any
            args = [Ellipsis if Hint("ellipsis") in a else self._pytype(a, depth + 1) for a in hint.args]
            if not args:
                return origin
            if origin is tuple:
                return tuple[args[0], ...] if Ellipsis in args else tuple[tuple(args)]  # type: ignore[misc]
            if origin is dict:
                return dict[args[0], args[1]] if len(args) == 2 else dict  # type: ignore[misc]
            return origin[args[0]]  # type: ignore[index]
        if hint.what == "class" and hint.cls is not None:
            if self.tree.is_enum(hint.cls):
                return self._enum(hint.cls)
            if self.reader.is_dataclass(hint.cls) or self.reader.is_dict_subclass(hint.cls):
                return dict[str, Any]
        return Any

    def _enum(self, cls: ClassInfo) -> Any:
        ev = config_evaluator(self.tree)
        values = [ev.enum_value(EnumMember(cls, name)) for name in self.tree.enum_members(cls)]
        if not values or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            return Any
        return Literal[tuple(values)]  # type: ignore[valid-type]


def post_init_refusal(tree: SourceTree, cls: ClassInfo, value: dict[str, Any]) -> str | None:
    """The text of a raise `__post_init__` reaches for these field values whatever else holds, if any."""
    found = tree.method(cls, "__post_init__")
    if found is None:
        return None
    method, owner = found
    module = tree.module(owner.module)
    if module is None:
        return None
    fields = {k: v for k, v in value.items() if known(v)}
    for name, member in fields.items():
        enum = tree.field_enum(cls, name)
        if enum is not None and isinstance(member, str) and member in tree.enum_members(enum):
            fields[name] = EnumMember(enum, member)
    obj = Obj(cls, fields, defaults=True, label=cls.name)
    ev = config_evaluator(tree)
    try:
        ev.call_function(Function(module, method, owner), [], {}, self_value=obj)
    except OutOfBudget:
        return None
    failed = [o for o in ev.outcomes if o.site.kind in ("raise", "assert") and not o.path and not o.caught]
    if not failed or verdict(failed).value is not True:
        return None
    return " ".join(failed[0].site.message.split()) or "invalid value"


def field_validators(tree: SourceTree, cls: ClassInfo) -> dict[str, list[tuple[str, ast.FunctionDef, ClassInfo]]]:
    """Field name -> the `before`/`wrap`/`plain` field validators pydantic runs on its raw value."""
    out: dict[str, list[tuple[str, ast.FunctionDef, ClassInfo]]] = {}
    for klass in tree.ancestors(cls):
        for method in klass.methods.values():
            for deco in method.decorator_list:
                if not isinstance(deco, ast.Call) or (dotted(deco.func) or "").rpartition(".")[2] != "field_validator":
                    continue
                mode = next(
                    (k.value.value for k in deco.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)),
                    "after",
                )
                if mode in ("before", "wrap", "plain") and isinstance(method, ast.FunctionDef):
                    for arg in deco.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            out.setdefault(arg.value, []).append((mode, method, klass))
    return out

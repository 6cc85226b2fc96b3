"""The functions the evaluator evaluates itself: Python's builtins and a few of the standard library's
(dataclasses, copy, functools, operator), whitelisted methods of plain values, and the methods of values it
cannot see into (a tensor's `.max()` keeps what the tensor was derived from). Every one is pure over the values
given, and none builds a value larger than the evaluator's caps."""

from __future__ import annotations

import ast
import json
from typing import Any

from specguard.evaluation import environment
from specguard.evaluation.budget import Budget, builtin_result_size, method_result_size, size, too_large
from specguard.evaluation.objects import FORMAT_FIELD_SPEC, ObjectModel, written_fields
from specguard.evaluation.paths import Frame, State, join_values
from specguard.evaluation.values import (
    NO_LABELS,
    STAR_KWARGS,
    UNKNOWN,
    Abstract,
    Bound,
    ClassRef,
    EnumMember,
    FieldInfo,
    Function,
    Label,
    LiteralType,
    Many,
    Mapping,
    Method,
    ModuleRef,
    Obj,
    OneOf,
    Opaque,
    Partial,
    PyMethod,
    SuperRef,
    Sym,
    Tagged,
    is_unknown,
    known,
    labels_of,
    maybe_of,
    plain,
    unknown_from,
    why_of,
    with_labels,
)

MAX_ITERATIONS = 256  # a loop or a builtin walks a known sequence this far
_OPERATORS = {
    "or_": ast.BitOr,
    "and_": ast.BitAnd,
    "xor": ast.BitXor,
    "add": ast.Add,
    "sub": ast.Sub,
    "mul": ast.Mult,
    "floordiv": ast.FloorDiv,
    "truediv": ast.Div,
    "mod": ast.Mod,
    "iadd": ast.Add,
    "ior": ast.BitOr,
}
# Methods and functions of numeric libraries that give back (a part of) what they are given: what the result was
# derived from is what their first argument was.
VALUE_METHODS = frozenset(
    {"max", "min", "amax", "amin", "sum", "item", "tolist", "cpu", "cuda", "clone", "copy", "to", "int", "long"}
    | {"float", "numpy", "contiguous", "detach", "view", "reshape", "flatten", "squeeze", "unsqueeze", "ceil"}
    | {"floor", "round", "asarray", "array", "tensor", "as_tensor", "from_numpy", "cast", "astype"}
    | {"int32", "int64", "int16", "float32", "float64"}  # numpy's scalar types, called as conversions
)
# Functions of numeric libraries that build an array out of every argument they are given (joined, filled,
# appended): the result holds what each of them was derived from.
COMBINING = frozenset({"append", "concatenate", "hstack", "vstack", "stack", "cat", "full", "full_like", "pad"})
_SMALLER = "which is smaller is not known"
_REDUCTIONS = frozenset({"max", "min", "amax", "amin", "sum", "any", "all", "reduce"})
_MAPPING_VIEWS = frozenset({"items", "values", "keys", "get", "copy"})


class Builtins(ObjectModel):
    """Calls of builtins, of standard-library functions and of plain values' methods."""

    _dropped: set[int]
    work: Budget | None
    env: environment.ServedEnvironment

    def call(
        self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        raise NotImplementedError

    def binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        raise NotImplementedError

    def binop_at(self, op: ast.operator, left: Any, right: Any, state: State) -> Any:
        raise NotImplementedError

    def instantiate(
        self, cls: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        raise NotImplementedError

    def store(self, base: Any, attr: str, value: Any, state: State, node: ast.AST | None = None) -> None:
        raise NotImplementedError

    # ---- sequences ------------------------------------------------------------------------------------------

    def iterate(self, value: Any) -> list[Any] | None:
        """The elements of a known sequence (each keeping what the sequence was derived from), else None. What is
        walked is charged before it is walked."""
        inner = plain(value)
        labels = self.provenance(value) if isinstance(value, Tagged) else NO_LABELS
        items: list[Any] | None = None
        if isinstance(inner, (dict, list, tuple, set, frozenset, str)):
            self.charge(len(inner))
        if isinstance(inner, dict) and known(list(inner.keys())):
            items = list(inner.keys())
        elif isinstance(inner, (list, tuple)):
            items = list(inner)
        elif isinstance(inner, (set, frozenset)) and known(inner):
            items = sorted(inner, key=repr)
        elif isinstance(inner, str):
            items = list(inner)
        elif isinstance(inner, Obj) and inner.cls is not None and self.named_tuple(inner.cls):
            # a `NamedTuple` is the tuple of its fields, in the order it declares them
            declared = self.dataclass_fields(inner.cls) or []
            items = [inner.fields.get(name, UNKNOWN) for _, name in declared]
        if items is None:
            return None
        if len(items) > MAX_ITERATIONS and not (self.work is not None and isinstance(inner, (str, dict))):
            return None  # where work is counted, a string or a dict's keys are walked whole: the budget bounds it
        return [with_labels(item, labels) for item in items] if labels else items

    def element_of(self, value: Any) -> Any:
        """Any one element of a collection: what each element may be (each one walked, and charged)."""
        inner = plain(value)
        if isinstance(inner, Many):
            return with_labels(inner.element, inner.labels)
        if isinstance(inner, Mapping):  # iterating a dict gives its keys
            return with_labels(inner.key, inner.labels)
        items = self.iterate(value)
        if items:
            self.charge(sum(size(item) for item in items))
            return join_values([(item, frozenset()) for item in items])
        if isinstance(inner, (Abstract, Method)) or is_unknown(inner):
            return unknown_from(value, keep=frozenset(x.kind for x in labels_of(value)))
        return UNKNOWN

    def make_set(self, items: list[Any]) -> Any:
        """A set of these values; of unknown size where two of them may or may not be equal (an unknown)."""
        if any(is_unknown(plain(i)) and not isinstance(plain(i), Sym) for i in items) or not all(
            _hashable(i) for i in items
        ):
            return Many(join_values([(i, frozenset()) for i in items])) if items else set()
        return set(items)

    def evaluates(self, name: str) -> bool:
        """Whether the builtin or library function of this name is one the evaluator computes itself."""
        module, _, short = name.rpartition(".")
        return module in ("builtins", "builtins.object") or name in _STDLIB or short in ("get_args", "cast")

    # ---- builtins -------------------------------------------------------------------------------------------

    def builtin(
        self, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        module, _, short = name.rpartition(".")
        if module == "builtins" or module == "builtins.object":
            return self._python_builtin(
                short if module == "builtins" else f"object.{short}", args, kwargs, node, frame, state
            )
        handler = _STDLIB.get(name)
        if handler is not None:
            return handler(self, args, kwargs, node, frame, state)
        if short == "get_args" and len(args) == 1:
            value = args[0]
            return value.values if isinstance(value, LiteralType) else UNKNOWN
        if short == "cast" and len(args) == 2:
            return args[1]
        if name in ("os.getenv", "os.environ.get") and self.semantics.served_environment:
            return self._getenv(args, kwargs)
        if short in VALUE_METHODS and args:
            return self._value_preserving(short, args[0], args[1:], node)
        if short in COMBINING and (args or kwargs):
            return self._combined([*args, *kwargs.values()])
        if name in ("numpy.arange", "torch.arange") and len(args) in (1, 2) and (len(args) == 1 or args[0] == 0):
            spaced = unknown_from(*args, why=f"`{name}` is not evaluated")
            return Abstract(labels_of(spaced), maybe_of(spaced), why_of(spaced), args[-1], step=1)  # 0, 1, ..., n-1
        if short == "array" and args and isinstance(plain(args[0]), Abstract) and plain(args[0]).step is not None:
            return args[0]  # a copy of an evenly spaced array is one
        return unknown_from(*args, *kwargs.values(), why=f"`{name}` is not evaluated")

    def _getenv(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """A variable of the serving environment, never of specguard's own process."""
        name = plain(args[0]) if args else None
        if not isinstance(name, str) or kwargs:
            return UNKNOWN
        value = self.env.get(name)
        return value if value is not None else (args[1] if len(args) > 1 else None)

    def _python_builtin(
        self, short: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        if short == "callable" and len(args) == 1:
            value = plain(args[0])
            if isinstance(value, (Function, Bound, Partial, ClassRef)):
                return True
            return False if isinstance(value, (list, tuple, dict, str, int, float, Many, Mapping)) else UNKNOWN
        if short == "getattr" and len(args) in (2, 3) and isinstance(plain(args[1]), str):
            from specguard.evaluation.objects import MISSING

            # the same read as `obj.name`, at this call: what a client makes of that field applies here too
            value = self.getattr(args[0], plain(args[1]), state, frame.depth, missing=MISSING, node=node)
            if value is MISSING:
                return args[2] if len(args) == 3 else UNKNOWN
            return value
        if short == "hasattr" and len(args) == 2 and isinstance(plain(args[1]), str):
            from specguard.evaluation.objects import MISSING

            value = self.getattr(args[0], plain(args[1]), state, frame.depth, missing=MISSING)
            # an attribute of code outside the tree (`torch.npu`) is named, not known to exist
            return UNKNOWN if is_unknown(value) or isinstance(plain(value), Opaque) else value is not MISSING
        if short in ("setattr", "object.__setattr__") and len(args) == 3 and isinstance(plain(args[1]), str):
            self.store(args[0], plain(args[1]), args[2], state, node)
            return None
        if short == "isinstance" and len(args) == 2:
            return self.isinstance_of(args[0], args[1])
        if short == "super":
            if frame.owner is not None:
                for name in ("self", "cls"):
                    if name in state.locals:
                        return SuperRef(frame.owner, state.locals[name])
            if len(args) == 2 and isinstance(plain(args[0]), ClassRef):
                return SuperRef(plain(args[0]).info, args[1])
            return UNKNOWN
        if short in ("any", "all") and len(args) == 1:
            return self._any_all(short, args[0], node, frame, state)
        if short in ("max", "min", "sum"):
            return self._reduce_numbers(short, args, kwargs, node)
        if short == "len" and len(args) == 1:
            return self._len(args[0])
        if short in ("map", "filter") and len(args) == 2:
            return self._map(short, args[0], args[1], node, frame, state)
        if short == "round" and args and not known(plain(args[0])):
            return self._value_preserving("round", args[0], args[1:], node)
        if short == "range":
            return self._range(args)
        if short == "enumerate" and args:
            items = self.iterate(args[0])
            if items is None:
                return Many((UNKNOWN, self.element_of(args[0])))
            self.charge(len(items))
            return [(i, item) for i, item in enumerate(items)]
        if short == "zip" and args:
            columns = [self.iterate(a) for a in args]
            if any(c is None for c in columns):
                return Many(tuple(self.element_of(a) for a in args))
            rows = min(len(c) for c in columns)  # type: ignore[arg-type]
            if too_large(rows * len(columns)):
                return Many(tuple(self.element_of(a) for a in args))
            self.charge(rows * len(columns))  # sized before it is built
            return [tuple(row) for row in zip(*columns, strict=False)]  # type: ignore[arg-type]
        if short in ("next", "iter") and args:
            if short == "iter":
                return args[0]
            items = self.iterate(args[0])
            if items:
                return items[0]
            if len(args) > 1 and items is None:  # the first of what cannot be enumerated, or the default
                return join_values([(self.element_of(args[0]), frozenset()), (args[1], frozenset())])
            return args[1] if len(args) > 1 and items == [] else self.element_of(args[0])
        if short in ("list", "tuple", "set", "frozenset", "sorted", "reversed") and len(args) <= 1:
            return self._collection(short, args[0] if args else [], kwargs)
        if short == "vars" and len(args) == 1 and isinstance(plain(args[0]), Obj):
            return self.instance_dict(plain(args[0]), state)
        if short in ("int", "float", "abs", "bool", "str", "repr") and len(args) == 1 and not known(plain(args[0])):
            if short in ("bool", "str", "repr"):
                return unknown_from(args[0], keep=frozenset(x.kind for x in self.provenance(args[0])))
            return unknown_from(args[0], keep=frozenset(x.kind for x in labels_of(args[0])))
        if short == "type" and len(args) == 1 and isinstance(plain(args[0]), Obj):
            return self.type_of(plain(args[0]))  # the class it was built from: calling it builds another
        if short in ("type", "print"):
            return UNKNOWN if short == "type" else None
        if short == "dict" and len(args) <= 1:
            return self._dict(args[0] if args else {}, kwargs)
        plain_args = [plain(a) for a in args]
        plain_kwargs = {k: plain(v) for k, v in kwargs.items()}
        if not known(plain_args) or not known(plain_kwargs):
            return unknown_from(*args, *kwargs.values(), why=f"`{short}` of unknown values")
        fn = {"dict": dict, "int": int, "str": str, "float": float, "bool": bool, "abs": abs, "repr": repr}.get(short)
        if fn is None or any(isinstance(a, (Obj, ClassRef, EnumMember, Function, Bound, Opaque)) for a in plain_args):
            if short == "dict" and not args:
                return dict(kwargs)
            return UNKNOWN
        cost = builtin_result_size(short, plain_args)
        if cost is None or too_large(cost):
            return UNKNOWN  # never built: `str()` of a value that prints longer than the budget's largest
        self.charge(cost)
        try:
            result = fn(*plain_args, **plain_kwargs)
        except Exception as exc:  # noqa: BLE001 - a builtin refusing its input: the value is not known
            if not self.semantics.raise_ends_path:  # recorded as a raise, as the source's own are (`recorded`)
                call = f"{short}({', '.join(map(repr, plain_args))})"
                self.record("raise", frame.module, node, f"{call} raises {type(exc).__name__}: {exc}", state.path)
            return UNKNOWN
        if short == "dict" and not plain_args:
            return dict(kwargs)
        return with_labels(result, frozenset().union(*(labels_of(a) for a in args)) if args else NO_LABELS)

    def _dict(self, source: Any, kwargs: dict[str, Any]) -> Any:
        """`dict(mapping or pairs, **kwargs)`: the keys must be known, the values may be anything."""
        inner = plain(source)
        out: dict[Any, Any] = {}
        if isinstance(inner, dict):
            self.charge(len(inner))
            out.update(inner)
        else:
            pairs = self.iterate(source)
            if pairs is None:
                return unknown_from(source, *kwargs.values())
            for pair in pairs:
                pair = plain(pair)
                if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and known(plain(pair[0]))):
                    return unknown_from(source, *kwargs.values())
                out[plain(pair[0])] = pair[1]
        if STAR_KWARGS in kwargs:
            return unknown_from(*out.values(), *kwargs.values())
        out.update(kwargs)
        return out

    def _map(self, kind: str, func: Any, source: Any, node: ast.AST, frame: Frame, state: State) -> Any:
        """`map(f, xs)` and `filter(f, xs)`: `f` called on each element of a known sequence, or on any one."""
        items = self.iterate(source)
        if items is None:
            element = self.element_of(source)
            result = self.call(func, [element], {}, node, frame, state)
            return Many(result if kind == "map" else element)
        out = []
        for item in items:
            self.step()  # type: ignore[attr-defined]
            result = self.call(func, [item], {}, node, frame, state) if func is not None else item
            if kind == "map":
                out.append(result)
                continue
            truth = self.truth(result, frame, state)
            if truth is UNKNOWN:
                return Many(join_values([(i, frozenset()) for i in items]))
            if truth:
                out.append(item)
        return out

    def _len(self, value: Any) -> Any:
        inner = plain(value)
        if isinstance(inner, Abstract) and inner.length is not None:
            return inner.length
        if isinstance(inner, (list, tuple, set, frozenset, dict, str)):
            return with_labels(len(inner), self.provenance(value))
        return unknown_from(value, keep=frozenset(x.kind for x in self.provenance(value)))

    def _range(self, args: list[Any]) -> Any:
        bounds = [plain(a) for a in args]
        if known(bounds) and all(isinstance(b, int) for b in bounds) and 1 <= len(bounds) <= 3:
            try:
                values = range(*bounds)
            except ValueError:
                return UNKNOWN
            if len(values) <= MAX_ITERATIONS:
                return list(values)
        start, step = (bounds[0] if len(bounds) > 1 else 0), (bounds[2] if len(bounds) == 3 else 1)
        if type(start) is int and type(step) is int and step > 0:
            return Many(UNKNOWN, first=start)  # a loop over it starts at `start`, if it runs at all
        return Many(UNKNOWN)

    def _collection(self, kind: str, source: Any, kwargs: dict[str, Any]) -> Any:
        items = self.iterate(source)
        if items is None:
            inner = plain(source)
            if isinstance(inner, Many):
                return inner
            return Many(self.element_of(source), self.provenance(source))
        self.charge(len(items))  # the collection built from them
        if kind in ("set", "frozenset"):
            made = self.make_set(items)
            return frozenset(made) if kind == "frozenset" and isinstance(made, set) else made
        if kind == "sorted":
            if kwargs or not known([plain(i) for i in items]):
                return Many(join_values([(i, frozenset()) for i in items])) if items else []
            try:
                return sorted(items, key=plain)
            except TypeError:
                return UNKNOWN
        if kind == "reversed":
            return list(reversed(items))
        return tuple(items) if kind == "tuple" else list(items)

    def _any_all(self, kind: str, source: Any, node: ast.AST, frame: Frame, state: State) -> Any:
        items = self.iterate(source)
        inputs = items if items is not None else [self.element_of(source)]
        labels = frozenset().union(*(labels_of(v) for v in inputs)) if inputs else NO_LABELS
        labels = labels | self.hooks.reduced(self, kind, inputs, node)  # type: ignore[arg-type]
        if items is None:
            return unknown_from(source, keep=frozenset(x.kind for x in labels)) if labels else UNKNOWN
        self.charge(len(items))
        truths = [self.truth(v, frame, state) for v in items]
        if kind == "any":
            result = True if True in truths else (UNKNOWN if UNKNOWN in truths else False)
        else:
            result = False if False in truths else (UNKNOWN if UNKNOWN in truths else True)
        if result is UNKNOWN:
            maybe = frozenset().union(*(maybe_of(v) for v in items)) if items else NO_LABELS
            return Abstract(labels, maybe, tuple(dict.fromkeys(r for v in items for r in why_of(v)))[:4])
        return with_labels(result, labels)

    def _reduce_numbers(self, kind: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        """max/min/sum of known numbers; otherwise an unknown that keeps what its inputs were derived from (for
        `min`, only what every input was: the smallest of a padded and a real count is the real one)."""
        if kind == "sum":
            source = args[0] if args else []
            start = args[1] if len(args) > 1 else kwargs.get("start", 0)
            items = self.iterate(source)
            inputs = [*items, start] if items is not None else [self.element_of(source), start]
        else:
            items = self.iterate(args[0]) if len(args) == 1 else list(args)
            inputs = items if items is not None else [self.element_of(args[0])]
        labels = self._reduced_labels(kind, inputs, node)
        if items is not None and items and known([plain(v) for v in inputs]) and "key" not in kwargs:
            try:
                values = [plain(v) for v in inputs]
                result = (
                    sum(values[:-1], values[-1]) if kind == "sum" else max(values) if kind == "max" else min(values)
                )
            except (TypeError, ValueError):
                return UNKNOWN
            return with_labels(result, labels)
        if "default" in kwargs and items == []:
            return kwargs["default"]
        maybe = frozenset().union(*(maybe_of(v) for v in inputs)) if inputs else NO_LABELS
        why: tuple[str, ...] = ()
        if kind in ("min", "amin"):
            # what only some inputs are derived from may be the smallest: said, never dropped
            dropped = frozenset(
                x for v in inputs for x in labels_of(v) if x not in labels and x.kind not in self.hooks.bound_kinds
            )
            if dropped:
                maybe = maybe | dropped
                why = (f"`{kind}` of a derived value and one that is not (the real count, or a cap): {_SMALLER}",)
        return Abstract(labels, maybe - labels, why) if labels or maybe else UNKNOWN

    def _reduced_labels(self, kind: str, inputs: list[Any], node: ast.AST | None) -> frozenset[Label]:
        sets = [labels_of(v) for v in inputs] or [NO_LABELS]
        if kind in ("min", "amin"):
            # the smallest keeps what every unknown input is derived from: a known bound only caps it
            bounds = self.hooks.bound_kinds
            unknown = [
                s
                for v, s in zip(inputs, sets, strict=True)
                if not known(plain(v)) and not (s and bounds and all(x.kind in bounds for x in s))
            ] or sets
            kinds = set.intersection(*({x.kind for x in s} for s in unknown))
            labels = frozenset(x for s in sets for x in s if x.kind in kinds)
        else:
            labels = frozenset().union(*sets)
        return labels | self.hooks.reduced(self, kind, inputs, node)  # type: ignore[arg-type]

    # ---- methods ----------------------------------------------------------------------------------------------

    def unknown_method(self, method: Method, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        """`x.name(...)` of a value the evaluator cannot see into."""
        receiver = method.receiver
        inner = plain(receiver)
        if method.name == "size" and isinstance(inner, Abstract) and inner.length is not None and args == [0]:
            return inner.length
        if method.name == "copy" and isinstance(inner, Abstract) and inner.step is not None:
            return receiver  # a copy of an evenly spaced array is one
        if isinstance(inner, Mapping) and method.name in _MAPPING_VIEWS:
            return self._mapping_view(inner, method.name, args)
        if isinstance(inner, Abstract) and inner.kind is None and method.name in _MAPPING_VIEWS and labels_of(inner):
            # a dict the evaluation cannot see into (the target's metadata by layer): what it holds comes from
            # where it does
            item = with_labels(UNKNOWN, self.provenance(receiver))
            return self._mapping_view(Mapping(item, item), method.name, args)
        if method.name in VALUE_METHODS:
            return self._value_preserving(method.name, receiver, args, node)
        result = unknown_from(receiver, *args, *kwargs.values(), why=f"cannot resolve `{_call_text(node)}`")
        found = self.typed_method(inner, method.name) if isinstance(inner, Abstract) and inner.kind else None
        if found is None:
            return result
        klass, definition = found
        return self.kind_from(result, self.promised(self.tree.module(klass.module), klass, definition))

    def _mapping_view(self, mapping: Mapping, name: str, args: list[Any]) -> Any:
        """`items()`, `values()`, `keys()`, `get(key[, default])`, `copy()` of a dict of unknown keys."""
        key, value = with_labels(mapping.key, mapping.labels), with_labels(mapping.value, mapping.labels)
        if name == "items":
            return Many((key, value))
        if name == "values":
            return Many(value)
        if name == "keys":
            return Many(key)
        if name == "copy":
            return mapping
        default = args[1] if len(args) > 1 else None  # `get`: the key may be missing
        return join_values([(value, frozenset()), (default, frozenset())])

    def _value_preserving(self, name: str, source: Any, rest: list[Any], node: ast.AST) -> Any:
        inner = plain(source)
        if isinstance(inner, Many):
            source = inner.element
        labels = labels_of(source)
        if name in _REDUCTIONS:
            labels = labels | self.hooks.reduced(self, name, [source], node)  # type: ignore[arg-type]
        if not labels and not maybe_of(source):
            return UNKNOWN
        return Abstract(labels, maybe_of(source), why_of(source))

    def _combined(self, parts: list[Any]) -> Any:
        """An array built from every part: derived from each (an element of a container is what it holds)."""
        parts = [plain(p).element if isinstance(plain(p), Many) else p for p in parts]
        sources = [x for p in parts for x in (p if isinstance(plain(p), (list, tuple)) else [p])]
        labels = frozenset().union(*(labels_of(p) for p in sources))
        maybe = frozenset().union(*(maybe_of(p) for p in sources))
        why = tuple(dict.fromkeys(r for p in sources for r in why_of(p)))
        return Abstract(labels, maybe - labels, why[:4]) if labels or maybe else UNKNOWN

    def py_method(self, method: PyMethod, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = method.target
        plain_args = [plain(a) for a in args]
        self.charge(_method_touches(target, method.name, plain_args))
        if method.name in ("append", "add", "insert", "update", "setdefault") and isinstance(target, (list, set, dict)):
            try:  # containers keep the values as given (labels included)
                result = getattr(target, method.name)(*args, **kwargs)
            except Exception:  # noqa: BLE001 - e.g. an unhashable element: no effect we can model
                return UNKNOWN
            return result
        if method.name == "extend" and isinstance(target, list):
            items = self.iterate(args[0]) if args else None
            if items is None or too_large(len(target) + len(items)):
                return UNKNOWN
            target.extend(items)
            return None
        if method.name in ("pop", "get", "copy", "values", "items", "keys", "index", "count", "remove", "discard"):
            # a dict's `get(key, default)`: the key must be known, the default is handed back as it is; a key that
            # is one of a few values gives one of what each gives
            keyed = method.name == "get" and isinstance(target, dict) and args
            if keyed and isinstance(plain(args[0]), OneOf) and all(known(x) for x in plain(args[0]).options):
                picks = [target.get(x, *args[1:2]) for x in plain(args[0]).options]
                return join_values([(pick, frozenset()) for pick in picks])
            if keyed and not known(plain(args[0])) and target:  # any of its values, or the default where it misses
                self.charge(len(target))
                picks = [*target.values(), args[1] if len(args) > 1 else None]
                return join_values([(pick, frozenset()) for pick in picks])
            asked = plain_args[:1] if method.name in ("get", "pop") and isinstance(target, dict) else plain_args
            if not known(asked) or not known({k: plain(v) for k, v in kwargs.items()}):
                return UNKNOWN
            call_args = (
                [plain(a) for a in args] if method.name in ("index", "count", "remove", "discard") else list(args)
            )
            if method.name in ("get", "pop") and isinstance(target, dict) and args:
                call_args = [plain(args[0]), *args[1:]]
            try:
                result = getattr(target, method.name)(*call_args)
            except Exception:  # noqa: BLE001 - e.g. list.remove of a missing value: no effect we can model
                return UNKNOWN
            if isinstance(result, (type({}.items()), type({}.keys()), type({}.values()))):
                return list(result)
            return result
        if not known(plain_args) or not known(kwargs) or (isinstance(target, str) and not known(target)):
            return UNKNOWN
        if method.name == "format" and isinstance(target, str) and FORMAT_FIELD_SPEC.search(target):
            return UNKNOWN  # a width or an attribute path in a format field: nothing a verdict needs, and costly
        cost = method_result_size(target, method.name, plain_args, kwargs)
        if too_large(cost):
            return UNKNOWN  # never built: `s.replace("a", s)`, `"".join([s] * n)`
        self.charge(cost)  # what it builds (what it walks is charged above)
        try:
            return getattr(target, method.name)(*plain_args, **kwargs)
        except Exception:  # noqa: BLE001 - a method refusing its input: no effect we can model
            return UNKNOWN


# ---- the standard library ------------------------------------------------------------------------------------


def _replace(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    source = plain(args[0]) if args else None
    if not isinstance(source, Obj) and (not args or STAR_KWARGS in kwargs or not kwargs):
        return unknown_from(*args, *kwargs.values())
    # an object not known: its copy holds what the call sets, every other field unknown as in it
    copied = _copy_of(source, state) if isinstance(source, Obj) else Obj(None, label="replaced")
    copied.fields.update(kwargs)
    if isinstance(node, ast.Call):
        copied.nodes.update({kw.arg: kw for kw in node.keywords if kw.arg})
    return copied


def _copy(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    source = plain(args[0]) if args else None
    if isinstance(source, Obj):
        return _copy_of(source, state)
    if isinstance(source, (list, dict, set)):
        return type(source)(source)
    return args[0] if args else UNKNOWN


def _copy_of(source: Obj, state: State) -> Obj:
    fields = {**source.fields, **written_fields(source, state)}
    return Obj(source.cls, fields, source.defaults, "", source.pinned, source.labels, dict(source.nodes), source.held)


def _namespace(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    """`types.SimpleNamespace(a=1, b=x)`: an object with those fields (one handed `**unknown` has others too)."""
    if args:
        return UNKNOWN  # (a mapping handed positionally, Python 3.13's form)
    return Obj(None, {k: v for k, v in kwargs.items() if k != STAR_KWARGS})


def _fields(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    target = plain(args[0]) if args else None
    cls = target.info if isinstance(target, ClassRef) else target.cls if isinstance(target, Obj) else None
    infos = ev.field_infos(cls) if cls is not None else None
    return infos if infos is not None else UNKNOWN


def _asdict(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    source = plain(args[0]) if args else None
    if isinstance(source, Obj) and source.cls is not None and ev.dataclass_fields(source.cls) is not None:
        return dict(_copy_of(source, state).fields)
    return UNKNOWN


def _partial(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    if not args:
        return UNKNOWN
    nodes = {kw.arg: kw for kw in node.keywords if kw.arg} if isinstance(node, ast.Call) else {}
    func = args[0]
    first = node.args[0] if isinstance(node, ast.Call) and node.args else None
    if is_unknown(plain(func)) and isinstance(first, ast.Attribute):
        func = Method(UNKNOWN, first.attr)  # a method of something it cannot see into, named as a call names it
    return Partial(func, tuple(args[1:]), dict(kwargs), nodes)


def _reduce(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    if len(args) < 2:
        return UNKNOWN
    fn, items = plain(args[0]), ev.iterate(args[1])
    inputs = items if items is not None else [ev.element_of(args[1])]
    labels = ev._reduced_labels("reduce", [*inputs, *args[2:]], node)
    if items is None:
        return Abstract(labels) if labels else UNKNOWN
    values = list(items)
    acc = args[2] if len(args) > 2 else (values.pop(0) if values else UNKNOWN)
    for item in values:
        ev.step()  # type: ignore[attr-defined]
        if isinstance(fn, Opaque) and fn.name.startswith("operator.") and fn.name[9:] in _OPERATORS:
            acc = ev.binop(_OPERATORS[fn.name[9:]](), acc, item)
        else:
            acc = ev.call(fn, [acc, item], {}, node, frame, state)
    return with_labels(acc, labels)


def _operator(name: str) -> Any:
    def apply(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
        return ev.binop(_OPERATORS[name](), args[0], args[1]) if len(args) == 2 else UNKNOWN

    return apply


def _math(ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State) -> Any:
    return ev._value_preserving("ceil", args[0], args[1:], node) if args else UNKNOWN


def _import_module(
    ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
) -> Any:
    """`importlib.import_module` of a known name of the tree: that module, read, never imported (a registry naming
    its classes by qualified name: vLLM 0.34.0's `resolve_obj_by_qualname`)."""
    name = plain(args[0]) if len(args) == 1 and not kwargs else None
    if isinstance(name, str) and ev.tree.module(name) is not None:
        return ModuleRef(name)
    return unknown_from(*args, *kwargs.values(), why="`importlib.import_module` of a module outside the tree")


def _json_loads(
    ev: Builtins, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
) -> Any:
    """`json.loads` of a known string: data parsed, never run; what it refuses is recorded as a raise where raises
    are outcomes (the serving environment's `VLLM_..._CONFIG='{not json'`)."""
    text = plain(args[0]) if len(args) == 1 and not kwargs else None
    if not isinstance(text, str) or too_large(len(text)):
        return unknown_from(*args, *kwargs.values(), why="`json.loads` of an unknown value")
    ev.charge(len(text))
    try:
        return json.loads(text)
    except ValueError as exc:
        message = f"json.loads({text!r}) raises {type(exc).__name__}: {exc}"
        return ev.refuses(type(exc).__name__, message, node, frame, state)


_STDLIB = {
    "json.loads": _json_loads,
    "importlib.import_module": _import_module,
    "dataclasses.replace": _replace,
    "dataclasses.fields": _fields,
    "dataclasses.asdict": _asdict,
    "copy.copy": _copy,
    "types.SimpleNamespace": _namespace,
    "copy.deepcopy": _copy,
    "functools.partial": _partial,
    "functools.reduce": _reduce,
    "math.ceil": _math,
    "math.floor": _math,
    **{f"operator.{name}": _operator(name) for name in _OPERATORS},
}


# Methods that touch a fixed number of a container's elements, whatever its size.
_CONSTANT_TIME = frozenset({"get", "setdefault", "append", "add", "discard", "__getitem__"})


def _method_touches(target: Any, name: str, args: list[Any]) -> int:
    """How many elements a method of a plain value walks (the target's, the arguments'), before it is called:
    `L.count(x)`, `L.index(x)`, `s.split()` walk the whole target; `d.get(k)` touches one."""
    arguments = sum(size(a) for a in args)
    if name in _CONSTANT_TIME or (name == "pop" and isinstance(target, dict)):
        return 1 + arguments
    return size(target) + arguments


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _call_text(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)  # type: ignore[arg-type]
    return (text if len(text) <= 60 else text[:57] + "...") + "(...)"


__all__ = ["Builtins", "FieldInfo", "MAX_ITERATIONS", "VALUE_METHODS"]

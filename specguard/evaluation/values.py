"""The values the evaluator computes with.

Plain Python values (small ints, bools, strings, None, tuples, lists, sets and dicts of values) are themselves.
What the source does not determine is unknown: `UNKNOWN`, or an `Abstract` value that says what it was derived
from (its labels: "a padded token count", "the instance's state", ...) and, where the evaluator could not compute
it (an unresolved call, a budget), which labels it may carry and why it could not. A `Tagged` value is a known
value with labels (a layer's flag in a group the rule built). `Sym` is an unknown with an identity: equal to
itself, so a group of specs that agree on a field agree in every comparison. Everything else stands for what the
analyzed source defines (classes, functions, enum members, objects) or what lies outside it (`Opaque`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

from specguard.evaluation.budget import Budget
from specguard.program.tree import ClassInfo, ParsedModule


class _Unknown:
    """A value the evaluation does not determine and knows nothing about."""

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
# A `**mapping` the evaluator could not read: its key in the keyword arguments a hook receives.
STAR_KWARGS = "\0**"
STAR_UNKNOWN: Any = object()


@dataclass(frozen=True)
class Label:
    """What a value was derived from: its kind (a client's word: "padded", "state", "flag") and where it came
    from, for messages ("`batch_desc.num_tokens`", line 12)."""

    kind: str
    text: str = ""
    span: tuple[int, int, int, int] | None = None
    path: str = ""  # the file of `span`
    origin: str = ""  # which instance of the source, where a client tells them apart (one descriptor of several)
    steps: tuple[str, ...] = ()  # the hops from the source on (a local, a helper's return), for messages

    def __repr__(self) -> str:
        return f"{self.kind}({self.text})" if self.text else self.kind

    def then(self, hop: str) -> Label:
        if self.steps and self.steps[-1] == hop:
            return self
        return Label(self.kind, self.text, self.span, self.path, self.origin, (*self.steps, hop)[-MAX_STEPS:])

    def how(self) -> str:
        """The hops as a message's clause, nearest the use first: "through `n` (line 26), returned by `f`"."""
        path = ", ".join(reversed(self.steps))
        return path if not path or path.startswith("returned by") else f"through {path}"


NO_LABELS: frozenset[Label] = frozenset()
MAX_LABELS = 8  # per kind a value keeps this many sources; more say nothing new to a message
MAX_STEPS = 6  # the hops a message shows, nearest the use


def _place(label: Label) -> tuple:
    """A total order on labels, so that a choice among them never depends on a set's iteration order (string
    hashes change from run to run)."""
    return (label.kind, label.span or (0, 0, 0, 0), label.path, label.text, label.origin, label.steps)


def nearest(labels: Iterable[Label]) -> Label:
    """The label with the fewest hops from its source; among equals, the first in the file."""
    return min(labels, key=lambda label: (len(label.steps), _place(label)))


def bounded(labels: frozenset[Label]) -> frozenset[Label]:
    if len(labels) <= MAX_LABELS:
        return labels
    kept: dict[str, list[Label]] = {}
    for label in sorted(labels, key=_place):
        group = kept.setdefault(label.kind, [])
        if len(group) < 2:
            group.append(label)
    return frozenset(x for group in kept.values() for x in group)


@dataclass(frozen=True, eq=False)
class Abstract:
    """An unknown value with what it derives from. `labels`: derived on some path the evaluation followed in full;
    `maybe`: derived perhaps, through something it could not evaluate (`why` says what); `length`: the length of a
    sliced buffer (`buf[:n]`), when known; `kind`: the class an annotation says it is an instance of (its methods
    are known by name and by what they promise to return, though not followed); `step`: for an evenly spaced array
    from 0 (`np.arange(n) * q`), what its i-th element is i times (so its last is known from its length);
    `exists`: an object, never None (a tensor a call the client knows made)."""

    labels: frozenset[Label] = NO_LABELS
    maybe: frozenset[Label] = NO_LABELS
    why: tuple[str, ...] = ()
    length: Any = None
    kind: ClassInfo | None = None
    step: Any = None
    exists: bool = False

    def __bool__(self) -> bool:
        raise TypeError("an abstract value has no truth value; use truth()")

    def __repr__(self) -> str:
        parts = [repr(sorted(self.labels, key=repr))] if self.labels else []
        parts += [f"maybe={sorted(self.maybe, key=repr)}"] if self.maybe else []
        parts += [f"kind={self.kind.name}"] if self.kind is not None else []
        return f"Abstract({', '.join(parts)})"


@dataclass(frozen=True)
class Sym:
    """An unknown with an identity (`name`): equal to itself, unknown against anything else."""

    name: str
    labels: frozenset[Label] = field(default=NO_LABELS, compare=False)


@dataclass(frozen=True, eq=False)
class Tagged:
    """A known value with labels; compares, hashes and tests as the value itself."""

    value: Any
    labels: frozenset[Label]

    def __eq__(self, other: object) -> bool:
        return bool(self.value == (other.value if isinstance(other, Tagged) else other))

    def __hash__(self) -> int:
        return hash(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __repr__(self) -> str:
        return f"Tagged({self.value!r})"


@dataclass(frozen=True, eq=False)
class OneOf:
    """One of a few known values: a variable that paths set differently (a mode one branch demoted to NONE)."""

    options: tuple[Any, ...]
    labels: frozenset[Label] = NO_LABELS


MAX_OPTIONS = 6


def one_of(options: list[Any], labels: frozenset[Label] = NO_LABELS) -> Any:
    """The value that is one of these known scalars; None when they are not all such, or too many."""
    flat: list[Any] = []
    for option in options:
        labels = labels | (option.labels if isinstance(option, (Tagged, OneOf)) else NO_LABELS)
        for item in option.options if isinstance(option, OneOf) else [option]:
            item = plain(item)
            if not isinstance(item, (bool, int, str, type(None), EnumMember)) or isinstance(item, float):
                return None
            if not any(type(item) is type(x) and item == x for x in flat):
                flat.append(item)
                if len(flat) > MAX_OPTIONS:  # stop here: the elements of a large container would take its square
                    return None
    if len(flat) == 1:
        return with_labels(flat[0], labels)
    return OneOf(tuple(flat), bounded(labels))


@dataclass(frozen=True, eq=False)
class Many:
    """A collection of unknown size whose every element is like `element` (a `list[X]` parameter); `first`, where
    known, is what a loop over it takes on its first round (`range(n)`: 0)."""

    element: Any
    labels: frozenset[Label] = NO_LABELS
    first: Any = None


@dataclass(frozen=True, eq=False)
class Mapping:
    """A dict of unknown keys (a comprehension over a collection of unknown size): every key is like `key`, every
    value like `value`; a lookup by any key is `value`, its items are pairs of the two."""

    key: Any
    value: Any
    labels: frozenset[Label] = NO_LABELS


@dataclass(eq=False)
class Obj:
    """An object whose attributes the evaluation knows (a config section, a descriptor, a spec, `self`).

    `defaults`: a missing attribute falls back to the class-level value written in the source (a dataclass built
    from the user's JSON, a class's ClassVars); otherwise it is unknown.
    """

    cls: ClassInfo | None
    fields: dict[str, Any] = field(default_factory=dict)
    defaults: bool = False
    label: str = ""
    # Attributes the situation fixes: assignments to them in evaluated code are ignored (a builder built for
    # a draft layer stays a draft builder whatever its constructor computes from the layers).
    pinned: frozenset[str] = frozenset()
    labels: frozenset[Label] = NO_LABELS
    nodes: dict[str, ast.AST] = field(default_factory=dict)  # where each field was written, for messages and fixes
    # Held by an instance attribute that other methods set: its own methods, called from anywhere, may have
    # written its fields since it was built, so a field reads as the join of its value and what they write.
    held: bool = False

    def __repr__(self) -> str:
        return f"<{self.label or (self.cls.name if self.cls else 'object')}>"


@dataclass(frozen=True, eq=False)
class TypeOf:
    """`type(x)` of an object whose class the evaluation does not read (one a rule modelled, a descriptor):
    calling it with keywords builds another object like `x` holding those fields."""

    instance: Obj


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
    closure: MutableMapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")

    @property
    def qualname(self) -> str:
        return f"{self.owner.name}.{self.name}" if self.owner is not None else self.name


@dataclass(frozen=True, eq=False)
class Bound:
    func: Function
    self_value: Any


@dataclass(frozen=True, eq=False)
class Partial:
    """`functools.partial(func, *args, **kwargs)`; `nodes` are the argument nodes the partial bound."""

    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    nodes: dict[str, ast.AST] = field(default_factory=dict)


class Deferred:
    """What a call stored into an attribute will be, evaluated the first time something reads it: a writer of
    instance attributes, run for one of them, does not evaluate (or parse the module of) the calls behind the
    others. `thunk` evaluates it where it was written; a read of it while it is being evaluated is unknown."""

    __slots__ = ("_thunk", "_value", "initial")

    def __init__(self, thunk: Callable[[], Any]) -> None:
        self._thunk: Callable[[], Any] | None = thunk
        self._value: Any = UNKNOWN
        self.initial: Any = None  # a container it evaluated to, as it was then (code may change it after)

    @property
    def settled(self) -> bool:
        return self._thunk is None

    def value(self) -> Any:
        if self._thunk is not None:
            thunk, self._thunk = self._thunk, None
            self._value = thunk()
            inner = plain(self._value)
            if isinstance(inner, (list, dict, set)):
                self.initial = type(inner)(inner)
        return self._value


def settled(value: Any) -> Any:
    """A stored value as it is read: a deferred one evaluated."""
    return value.value() if isinstance(value, Deferred) else value


@dataclass(frozen=True, eq=False)
class Method:
    """`value.name` of a value the evaluator cannot see into, about to be called (`tensor.max()`)."""

    receiver: Any
    name: str


def answer_key(func: Any) -> tuple[str, str] | None:
    """Where a path keeps the answer to a question asked with no argument: of a value known only by name
    (`batch.forward_mode.is_idle()`, which a test that passed on the path answers), or of a function of the tree
    whose calls a client answers (`require_mlp_sync()`), so that reading a test again need not run it."""
    func = plain(func)
    if isinstance(func, Sym):
        return (func.name, "()")
    if isinstance(func, Method) and isinstance(func.receiver, Sym):  # (the same question as the `Sym` above)
        return (f"{func.receiver.name}.{func.name}", "()")
    if isinstance(func, Function) and func.owner is None:
        return (f"{func.module.name}.{func.name}", "()")
    return None


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
    """A value a client of the evaluator stands in for (an argparse parser being filled); see `Hooks.call`."""

    kind: str


@dataclass(frozen=True, eq=False)
class TokenAttr:
    """`token.attr`: calling it goes to the hook."""

    token: Token
    attr: str


@dataclass(frozen=True)
class FieldInfo:
    """One field of a dataclass, as `dataclasses.fields()` returns it."""

    name: str
    compare: bool = True


UNKNOWNS = (_Unknown, Abstract, Sym, Many, Mapping, Method, OneOf)
_SCALARS = (str, int, float, type(None))


def is_unknown(value: Any) -> bool:
    return isinstance(value, UNKNOWNS)


def plain(value: Any) -> Any:
    """The value without its labels."""
    return value.value if isinstance(value, Tagged) else value


def known(value: Any, budget: Budget | None = None) -> bool:
    """A plain value with nothing unknown inside it (walked without recursion: nesting and cycles cost nothing
    more than their elements, which `budget` is charged for)."""
    if isinstance(value, _SCALARS):
        return True
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, Tagged):
            stack.append(item.value)
        elif isinstance(item, UNKNOWNS):
            return False
        elif isinstance(item, (dict, list, tuple, set, frozenset)):
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


def labels_of(value: Any, depth: int = 0) -> frozenset[Label]:
    """Every label a value carries, looking into containers (a few levels deep)."""
    if isinstance(value, (Abstract,)):
        return value.labels
    if isinstance(value, Method):
        return labels_of(value.receiver, depth + 1) if depth < 3 else NO_LABELS
    if isinstance(value, (Tagged, Sym, Many, Mapping, Obj, OneOf)):
        out = value.labels
        if isinstance(value, Many) and depth < 3:
            out = out | labels_of(value.element, depth + 1)
        if isinstance(value, Mapping) and depth < 3:
            out = out | labels_of(value.key, depth + 1) | labels_of(value.value, depth + 1)
        return out
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        found: frozenset[Label] = NO_LABELS
        for item in list(value)[:64]:
            found = found | labels_of(item, depth + 1)
        return found
    if depth < 3 and isinstance(value, dict):
        found = NO_LABELS
        for item in list(value.values())[:64]:
            found = found | labels_of(item, depth + 1)
        return found
    return NO_LABELS


def maybe_of(value: Any) -> frozenset[Label]:
    return value.maybe if isinstance(value, Abstract) else NO_LABELS


def why_of(value: Any) -> tuple[str, ...]:
    return value.why if isinstance(value, Abstract) else ()


def not_none(value: Any) -> Any:
    """The value where it is known not to be None: a `one of` without None, an abstract value that exists."""
    if isinstance(value, OneOf) and any(x is None for x in value.options):
        options = tuple(x for x in value.options if x is not None)
        return with_labels(options[0], value.labels) if len(options) == 1 else OneOf(options, value.labels)
    if isinstance(value, Abstract) and not value.exists:
        return replace(value, exists=True)
    return value


def with_labels(value: Any, labels: frozenset[Label]) -> Any:
    """The value carrying these labels too (a new value; objects keep their identity and are not relabelled)."""
    if not labels:
        return value
    if value is UNKNOWN:
        return Abstract(bounded(labels))
    if isinstance(value, Abstract):
        return replace(value, labels=bounded(value.labels | labels))
    if isinstance(value, Tagged):
        return Tagged(value.value, bounded(value.labels | labels))
    if isinstance(value, Sym):
        return Sym(value.name, bounded(value.labels | labels))
    if isinstance(value, Many):
        return Many(value.element, bounded(value.labels | labels))
    if isinstance(value, OneOf):
        return OneOf(value.options, bounded(value.labels | labels))
    if isinstance(value, (bool, int, float, str, bytes, type(None), EnumMember, tuple)):
        return Tagged(value, bounded(labels))
    return value


def traced(value: Any, hop: str, kinds: frozenset[str]) -> Any:
    """The value with `hop` added to the path of its labels of these kinds (a new value; objects and mutable
    containers keep their identity and are not traced)."""
    if kinds and isinstance(value, tuple):  # immutable: safe to rebuild
        return tuple(traced(item, hop, kinds) for item in value)
    if not kinds or not isinstance(value, (Abstract, Tagged, Sym, Many, OneOf)):
        return value
    labels = value.labels
    if not any(x.kind in kinds for x in labels):
        return value
    moved = frozenset(x.then(hop) if x.kind in kinds else x for x in labels)
    if isinstance(value, Abstract):
        return replace(value, labels=moved)
    if isinstance(value, Tagged):
        return Tagged(value.value, moved)
    if isinstance(value, Sym):
        return Sym(value.name, moved)
    if isinstance(value, Many):
        return Many(value.element, moved)
    return OneOf(value.options, moved)


def relabelled(value: Any, change: Callable[[Label], Label]) -> Any:
    """The value with every label (its `maybe` ones and its elements' too) replaced by `change(label)`: a new value;
    objects and mutable containers keep their identity and are not relabelled."""
    if isinstance(value, tuple):
        return tuple(relabelled(item, change) for item in value)
    if not isinstance(value, (Abstract, Tagged, Sym, Many, OneOf)):
        return value
    labels = frozenset(change(x) for x in value.labels)
    if isinstance(value, Abstract):
        return replace(value, labels=labels, maybe=frozenset(change(x) for x in value.maybe))
    if isinstance(value, Tagged):
        return Tagged(value.value, labels)
    if isinstance(value, Sym):
        return Sym(value.name, labels)
    if isinstance(value, Many):
        return Many(relabelled(value.element, change), labels)
    return OneOf(value.options, labels)


QUOTIENT = "\0quotient"  # the evaluator's own label kind: a quotient by the divisor its text names


def divisor_identity(value: Any) -> str | None:
    """What names a divisor up to its sign (a number, or an unknown with an identity), so that a product by it can
    be told to undo a division by it; None for a value without one."""
    inner = plain(value)
    if isinstance(inner, Sym):
        return inner.name.lstrip("-")
    if isinstance(inner, (int, float)) and not isinstance(inner, bool) and 0 < abs(inner) < 2**63:
        return repr(abs(inner))  # an alignment or a width, not a number too large to spell
    return None


def place_text(path: str, line: int, home: str | None) -> str:
    """A place as a message names it: `line N`, after its file's name where that is not the file (`home`) the
    message is about."""
    return f"line {line}" if home is None or path == home else f"{path.rpartition('/')[2]} line {line}"


def unknown_from(*values: Any, why: str = "", keep: frozenset[str] = frozenset()) -> Any:
    """An unknown result computed from `values`: the labels of kinds in `keep` carry over as they are, every other
    label becomes a `maybe` (the result may or may not be derived from it); `why` says why it is unknown."""
    labels: frozenset[Label] = NO_LABELS
    maybe: frozenset[Label] = NO_LABELS
    reasons: tuple[str, ...] = ()
    for value in values:
        for label in labels_of(value):
            if label.kind in keep:
                labels = labels | {label}
            else:
                maybe = maybe | {label}
        maybe = maybe | maybe_of(value)
        reasons = reasons + tuple(r for r in why_of(value) if r not in reasons)
    if why and maybe and why not in reasons:
        reasons = (why, *reasons)
    if not (labels or maybe):
        return UNKNOWN
    return Abstract(bounded(labels), bounded(maybe), reasons[:4])


def same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, _Unknown) or isinstance(b, _Unknown):
        return False
    if isinstance(a, Sym) and isinstance(b, Sym):
        return a.name == b.name and a.labels == b.labels
    if isinstance(a, (Abstract, Many)) or isinstance(b, (Abstract, Many)):
        return False
    if isinstance(a, Tagged) or isinstance(b, Tagged):
        return isinstance(a, Tagged) and isinstance(b, Tagged) and a.labels == b.labels and same_value(a.value, b.value)
    if isinstance(a, (Obj, Function, Bound, Partial)) or isinstance(b, (Obj, Function, Bound, Partial)):
        return False
    try:
        return type(a) is type(b) and known(a) and known(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - comparing arbitrary evaluated values must not fail the evaluation
        return False


def anonymous(value: Any) -> bool:
    """An unknown that is nothing more: no kind, length or step the evaluation knows of it, nor an object."""
    if value is UNKNOWN:
        return True
    return (
        isinstance(value, Abstract)
        and value.kind is None
        and value.length is None
        and value.step is None
        and not value.exists
    )

"""The plain data of the dataflow layer: tracked items, what to track (`FlowSpec`), and per-function summaries.

Everything here is frozen dataclasses of str/int/None/tuples (and dicts in `FlowSpec`), so summaries can live in
the analysis cache and travel to worker processes; no `ast` node is ever stored.

A tracked value is a `Value`: a dict from an item's identity (label, origin, key) to the `Item`. An empty dict is
an untracked value; most values are empty, and the helpers below return their input unchanged when they can.
Values are never mutated once built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeAlias

ANY = "*"  # a key: some element at an unknown key or position; an origin: one every guard of its kind clears
PARAM = "param"  # label of a summary's symbolic parameter: "whatever the caller passes as this parameter"
CALL = "call"  # label of a summary's call result, resolved against the callee's summary later
ATTR = "attr"  # label of a summary's `self.<attr>` read, resolved against the class's attributes later
SYMBOLIC = (PARAM, CALL, ATTR)
PARAM_ORIGIN = "param:"  # origin prefix of items that stand for (something derived from) a parameter
MAX_STEPS = 8  # the path a message shows keeps the steps nearest the sink

Key: TypeAlias = "str | int | None"  # None: the value itself; str: a dict key; int: a sequence position


def step(text: str, line: int = 0) -> str:
    """One hop of a value on its way to a sink, as a message shows it: "`n` (line 26)", "returned by `f`"."""
    return f"{text} (line {line})" if line else text


@dataclass(frozen=True)
class Item:
    """One tracked thing a value may hold: what it is (label), where it came from (origin), and the path."""

    label: str
    origin: str
    key: str | int | None = None
    source: str = ""  # what produced it, for messages: "`batch_desc.num_tokens`", "any", "or"
    steps: tuple[str, ...] = ()  # the hops from the source on, see step()
    span: tuple[int, int, int, int] | None = None  # the producing node in this file: ast line/byte-col spans

    def at(self, key: Key) -> Item:
        return Item(self.label, self.origin, key, self.source, self.steps, self.span)

    def then(self, hop: str) -> Item:
        return Item(self.label, self.origin, self.key, self.source, (*self.steps, hop)[-MAX_STEPS:], self.span)

    def path(self) -> str:
        """ "`n` (line 26), returned by `S._padded`": the hops from the sink back to the source."""
        return ", ".join(reversed(self.steps))

    def how(self) -> str:
        """The path as a message's clause: "through `n` (line 26), returned by `f`", "returned by `f`", ""."""
        path = self.path()
        return path if not path or path.startswith("returned by") else f"through {path}"


Value: TypeAlias = "dict[tuple[str, str, Key], Item]"
EMPTY: Value = {}  # shared: never mutate it


def value_of(items: tuple[Item, ...] | list[Item]) -> Value:
    out: Value = {}
    for item in items:
        ident = (item.label, item.origin, item.key)
        held = out.get(ident)
        if held is None or len(item.steps) < len(held.steps):
            out[ident] = item
    return out


def items_of(value: Value) -> tuple[Item, ...]:
    """A value as stored data, in a stable order (cache keys hash it)."""
    return tuple(sorted(value.values(), key=lambda i: (i.label, i.origin, str(i.key), len(i.steps))))


def join(a: Value, b: Value) -> Value:
    """Either value: the union of their items, keeping the shorter path where both hold the same item."""
    if not b or a is b:
        return a
    if not a:
        return b
    out = dict(a)
    for ident, item in b.items():
        held = out.get(ident)
        if held is None or len(item.steps) < len(held.steps):
            out[ident] = item
    return out


def rekey(value: Value, key: Key) -> Value:
    """The same items placed at `key` (an element of a container), or taken out of containers (None)."""
    if not value or all(i.key == key for i in value.values()):
        return value
    return value_of([i.at(key) for i in value.values()])


def select(value: Value, key: Key) -> Value:
    """What `value[key]` (or one element, for ANY) may hold: the items at that key, and the value's own items."""
    if not value or all(i.key is None for i in value.values()):
        return value
    return value_of([i if i.key is None else i.at(None) for i in value.values() if _at_key(i.key, key)])


def _at_key(held: Key, wanted: Key) -> bool:
    return held is None or wanted == ANY or held in (ANY, wanted)


def extend(value: Value, *hops: str) -> Value:
    if not value or not hops:
        return value
    out = value
    for hop in hops:
        out = {ident: i.then(hop) for ident, i in out.items()}
    return out


def labelled(value: Value, label: str) -> list[Item]:
    return [i for i in value.values() if i.label == label]


# ---- what to track ----------------------------------------------------------------------------------------

EQUALS = "equals"  # `X == CONSTANT` (or is / != / is not / in, either operand order)
ONE_ELEMENT = "one-element"  # `len(X) == 1` (or <= 1, < 2, and their negations)
SAME = "same"  # `X == Y` where both sides carry the label with the same origin


@dataclass(frozen=True)
class Guard:
    """A test that, on the paths where it holds, makes the `clears` items of the tested origin harmless."""

    kind: str
    label: str  # the label the tested operand carries
    clears: tuple[str, ...]
    constant: str = ""  # EQUALS: the last name of the constant (`FULL` in `CUDAGraphMode.FULL`)
    universal: bool = False  # a check repeated for every element of a loop still holds after the loop


@dataclass(frozen=True)
class FlowSpec:
    """What one rule tracks, named by its pack. Labels are the rule's own words ("descriptor", "padded")."""

    producers: dict[str, str] = field(default_factory=dict)  # callee name -> label of its result
    annotations: dict[str, str] = field(default_factory=dict)  # annotation name -> label of the variable
    parameters: dict[str, str] = field(default_factory=dict)  # parameter name -> label
    # (owner label or ANY, attribute) -> (label, origin): an attribute read that derives a tracked value; an empty
    # origin inherits the owner item's. An ANY owner applies when no labelled owner rule matched.
    attributes: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    reductions: dict[str, str] = field(default_factory=dict)  # callee name -> label of its result
    reduced: str = ""  # the label whose origins a reduction or fold takes from what it reduces
    fold: str = ""  # label of an `or`/`and`/`|`/`&` accumulation inside a loop ("" to not track folds)
    guards: tuple[Guard, ...] = ()
    sinks: frozenset[str] = frozenset()  # functions whose parameters a rule checks: summaries keep their signature

    @cached_property
    def owners(self) -> dict[str, tuple[str, ...]]:
        """label -> the owner labels an attribute rule derives it from (for applying summaries)."""
        found: dict[str, list[str]] = {}
        for (owner, _), (label, _) in self.attributes.items():
            if owner != ANY:
                found.setdefault(label, []).append(owner)
        return {label: tuple(dict.fromkeys(owners)) for label, owners in found.items()}

    @cached_property
    def carried(self) -> frozenset[str]:
        """Labels worth following into another module's function: values others derive from (descriptors) and
        values guards clear (padded counts). A value only tested (a mode) is not."""
        owners = {owner for owner, _ in self.attributes if owner != ANY}
        return frozenset(owners | {label for guard in self.guards for label in guard.clears})

    @cached_property
    def by_attribute(self) -> dict[str, list[tuple[str, str, str]]]:
        """attribute -> [(owner label, label, origin)], labelled owners first."""
        found: dict[str, list[tuple[str, str, str]]] = {}
        for (owner, attribute), (label, origin) in self.attributes.items():
            found.setdefault(attribute, []).append((owner, label, origin))
        return {a: sorted(rules, key=lambda r: r[0] == ANY) for a, rules in found.items()}


# ---- per-function summaries (stage one) and what a checked file gets from them ----------------------------


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


@dataclass(frozen=True)
class Arg:
    """An argument of a recorded call: positional, keyword, or unpacked with `*`/`**`."""

    items: tuple[Item, ...]
    keyword: str | None = None
    star: str = ""


@dataclass(frozen=True)
class CallFlow:
    """A call inside a summarized function, as written, with what its arguments carry."""

    callee: str  # "self.m", "cls.m", "super().m", "helpers.padded", "padded"
    args: tuple[Arg, ...]  # empty unless the call's result is used (returned, stored, passed on)
    line: int
    passes_tracked: bool = False  # it passes a value the function tracks itself: a rule needs the callee


@dataclass(frozen=True)
class FunctionFlow:
    """What a function does with tracked values, in terms of its own parameters (stage one), or resolved."""

    qualname: str
    signature: Signature
    intrinsic: tuple[tuple[str, str], ...] = ()  # (parameter, label) it carries by annotation or name
    returns: tuple[Item, ...] = ()
    attributes: tuple[tuple[str, tuple[Item, ...]], ...] = ()  # self.<attr> -> what it is written with
    calls: tuple[CallFlow, ...] = ()  # CALL items name one by its index, "#3"

    def intrinsic_labels(self, parameter: str) -> tuple[str, ...]:
        return tuple(label for name, label in self.intrinsic if name == parameter)


@dataclass(frozen=True)
class FlowFacts:
    """What the rules of one file know from the rest of the project: resolved summaries of the functions its
    code calls (keyed as the rule names them: "Cls.method", "super(Cls).method", or a qualified function name)
    and what the instance attributes of its classes may hold ("Cls.attr")."""

    functions: tuple[tuple[str, FunctionFlow], ...] = ()
    attributes: tuple[tuple[str, tuple[Item, ...]], ...] = ()

    @cached_property
    def function_map(self) -> dict[str, FunctionFlow]:
        return dict(self.functions)

    @cached_property
    def attribute_map(self) -> dict[str, tuple[Item, ...]]:
        return dict(self.attributes)

"""Calls: which parameter each argument reaches, and what a callee's summary returns for given arguments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from specguard.analysis.dataflow.values import (
    ANY,
    EMPTY,
    MAX_STEPS,
    PARAM,
    PARAM_ORIGIN,
    FlowSpec,
    FunctionFlow,
    Item,
    Signature,
    Value,
    extend,
    join,
    rekey,
    select,
    value_of,
)


class Passed(NamedTuple):
    """One argument of a call as the walk evaluated it (`node` is the ast argument or keyword node)."""

    node: object
    keyword: str | None
    star: str  # "", "*" or "**"
    value: Value


def bind(signature: Signature | None, args: Sequence[Passed]) -> dict[str, list[tuple[Passed, Value]]]:
    """parameter -> the (argument, value) pairs that reach it. Without a signature, keywords only.

    A `*`-unpacked container maps its positions to parameters while the positions are known; a `**` dict maps
    its string keys; what reaches `*args`/`**kwargs` is kept there, at its position or key.
    """
    params: tuple[str, ...] = ()
    if signature is not None:
        params = signature.positional[1:] if signature.bound else signature.positional
    named = set(params) | set(signature.keyword_only if signature else ())
    out: dict[str, list[tuple[Passed, Value]]] = {}

    def add(name: str | None, arg: Passed, value: Value) -> None:
        if name is not None and value:
            out.setdefault(name, []).append((arg, value))

    def positional(index: int, arg: Passed, value: Value) -> None:
        if index < len(params):
            add(params[index], arg, value)
        elif signature is not None and signature.star:
            add(signature.star, arg, rekey(value, index - len(params)))

    def by_name(name: str, arg: Passed, value: Value) -> None:
        if name in named or signature is None:
            add(name, arg, value)
        elif signature.starstar:
            add(signature.starstar, arg, rekey(value, name))

    position: int | None = 0  # None once a `*` spread makes later positions unknown
    for arg in args:
        if arg.star == "" and arg.keyword is None:
            if position is not None:
                positional(position, arg, arg.value)
                position += 1
        elif arg.star == "":
            by_name(arg.keyword or "", arg, arg.value)
        elif arg.star == "*":
            for item in arg.value.values():
                if position is not None and isinstance(item.key, int):
                    positional(position + item.key, arg, value_of([item.at(None)]))
            position = None
        else:  # `**`
            for item in arg.value.values():
                if isinstance(item.key, str) and item.key != ANY:
                    by_name(item.key, arg, value_of([item.at(None)]))
    return out


def bound_values(signature: Signature | None, args: Sequence[Passed]) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for name, pairs in bind(signature, args).items():
        for _, value in pairs:
            out[name] = join(out.get(name, EMPTY), value)
    return out


def derive(spec: FlowSpec, label: str, passed: Value, intrinsic: tuple[str, ...]) -> list[tuple[Item, str]]:
    """For a summary item `label` of a parameter: the caller's items it stands for, as (caller item, origin).

    The parameter may carry the label itself (by annotation or name), or the item derives from it through an
    attribute rule (`d.num_tokens` of a descriptor `d`). A parameter that carries the label by its own
    annotation stands for a tracked value even when the caller's argument is not tracked (origin ANY).
    """
    found: list[tuple[Item, str]] = []
    for owner in ((label,) if label in intrinsic else ()) + spec.owners.get(label, ()):
        # a caller's own parameter (resolving one summary into another) stands for a possible owner
        matches = [i for i in passed.values() if i.label in (owner, PARAM) and i.key is None]
        found.extend((i, i.origin) for i in matches)
        if not matches and owner in intrinsic:
            found.append((Item(owner, ANY), ANY))
    return found


def apply(spec: FlowSpec, flow: FunctionFlow, passed: dict[str, Value], hop: str) -> Value:
    """What a call returns, in the caller's terms, given what reaches each parameter.

    Items the callee produced itself come back with origin ANY: the caller's guards do not name them.
    """
    out: Value = EMPTY
    for item in flow.returns:
        if not item.origin.startswith(PARAM_ORIGIN):
            out = join(out, value_of([replace(item, origin=ANY, span=None)]))
            continue
        param = item.origin[len(PARAM_ORIGIN) :]
        arg = passed.get(param, EMPTY)
        if item.label == PARAM:
            got = arg if item.key is None else rekey(select(arg, ANY), item.key)
            out = join(out, {ident: replace(i, steps=(*i.steps, *item.steps)[-MAX_STEPS:]) for ident, i in got.items()})
            continue
        for source, origin in derive(spec, item.label, arg, flow.intrinsic_labels(param)):
            steps = (*source.steps, *item.steps) if source.label == item.label else item.steps
            made = Item(item.label, origin, item.key, item.source, steps, None)
            out = join(out, value_of([made]))
    return extend(out, hop)

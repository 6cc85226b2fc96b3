"""Expressions, evaluated to values: names, literals and containers, operators, comparisons, subscripts and
comprehensions. A mixin of `evaluator.Evaluator`, which dispatches to it (a call is `calls`)."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from specguard.evaluation import exceptions
from specguard.evaluation.budget import MAX_ITEMS, result_size, too_large
from specguard.evaluation.builtins import MAX_ITERATIONS, Builtins
from specguard.evaluation.choices import joined
from specguard.evaluation.paths import (
    Frame,
    PathEnds,
    State,
    enclosing,
    join_values,
    merge,
    take_writes,
)
from specguard.evaluation.values import (
    NOT_HANDLED,
    QUOTIENT,
    STAR_UNKNOWN,
    UNKNOWN,
    Abstract,
    ClassRef,
    EnumMember,
    Function,
    Label,
    LiteralType,
    Many,
    Mapping,
    Method,
    Obj,
    OneOf,
    Opaque,
    Sym,
    Tagged,
    anonymous,
    divisor_identity,
    is_unknown,
    known,
    labels_of,
    maybe_of,
    plain,
    settled,
    unknown_from,
    why_of,
    with_labels,
)
from specguard.program.ast_tools import dotted, walked


class Expressions(Builtins):
    """How the evaluator computes each kind of expression."""

    def _e_constant(self, e: ast.Constant, frame: Frame, state: State) -> Any:
        if isinstance(e.value, (str, bytes)) and too_large(len(e.value)):
            return UNKNOWN  # larger than any value the evaluation builds: it would only cost what it touches
        return e.value

    def _e_name(self, e: ast.Name, frame: Frame, state: State) -> Any:
        if e.id in state.locals:
            return settled(state.locals[e.id])
        if frame.closure is not None and e.id in frame.closure:
            return settled(frame.closure[e.id])
        return self.module_value(frame.module, e.id)

    def _e_attribute(self, e: ast.Attribute, frame: Frame, state: State) -> Any:
        return self.getattr(self.eval(e.value, frame, state), e.attr, state, frame.depth, node=e)

    def _e_tuple(self, e: ast.Tuple, frame: Frame, state: State) -> Any:
        items = self._elements(e.elts, frame, state)
        return tuple(items) if isinstance(items, list) else items

    def _e_list(self, e: ast.List, frame: Frame, state: State) -> Any:
        return self._elements(e.elts, frame, state)

    def _e_set(self, e: ast.Set, frame: Frame, state: State) -> Any:
        values = self._elements(e.elts, frame, state)
        return self.make_set(values) if isinstance(values, list) else values

    def _elements(self, elts: list[ast.expr], frame: Frame, state: State) -> Any:
        if too_large(len(elts)):
            return UNKNOWN  # a literal over the largest value's size: unknown, never built
        out: list[Any] = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                value = self.eval(elt.value, frame, state)
                items = self.iterate(value)
                if items is None:  # a container with an unknown part: its length and order are unknown
                    rest = [self.eval(x.value if isinstance(x, ast.Starred) else x, frame, state) for x in elts]
                    return Many(
                        join_values(
                            [
                                (self.element_of(v) if isinstance(x, ast.Starred) else v, frozenset())
                                for x, v in zip(elts, rest, strict=True)
                            ]
                        )
                    )
                if too_large(len(out) + len(items)):
                    return UNKNOWN  # `[*L, *L]`: sized before it is built
                self.charge(len(items))
                out.extend(items)
            else:
                out.append(self.eval(elt, frame, state))
        if too_large(len(out)):
            return UNKNOWN
        self.charge(len(out) + 1)
        return out

    def _e_dict(self, e: ast.Dict, frame: Frame, state: State) -> Any:
        if too_large(len(e.keys)):
            return UNKNOWN  # a literal over the largest value's size: unknown, never built
        out: dict[Any, Any] = {}
        for index, (key, value) in enumerate(zip(e.keys, e.values, strict=True)):
            if key is None:
                merged = plain(self.eval(value, frame, state))
                if not isinstance(merged, dict):
                    return unknown_from(merged)
                if too_large(len(out) + len(merged)):
                    return UNKNOWN  # `{**D, **D}`: sized before it is built
                self.charge(len(merged))
                out.update(merged)
                continue
            k = self.eval(key, frame, state)
            if not known(plain(k)):  # keys unknown from here on: any of the values may be under any of them
                first = (k, self.eval(value, frame, state))
                return _mapping([*out.items(), first, *self._pairs(e, index + 1, frame, state)])
            try:
                out[plain(k)] = self.eval(value, frame, state)
            except TypeError:
                return UNKNOWN
        return out

    def _pairs(self, e: ast.Dict, start: int, frame: Frame, state: State) -> list[tuple[Any, Any]]:
        """The (key, value) pairs of a dict literal from its `start`-th entry on; a `**` entry gives what it holds."""
        pairs: list[tuple[Any, Any]] = []
        for key, value in zip(e.keys[start:], e.values[start:], strict=True):
            if key is not None:
                pairs.append((self.eval(key, frame, state), self.eval(value, frame, state)))
                continue
            merged = plain(self.eval(value, frame, state))
            if isinstance(merged, dict):
                pairs += list(merged.items())
            elif isinstance(merged, Mapping):
                pairs.append((merged.key, merged.value))
            else:
                pairs.append((UNKNOWN, unknown_from(merged)))
        return pairs

    def _e_joinedstr(self, e: ast.JoinedStr, frame: Frame, state: State) -> Any:
        parts: list[str] = []
        for value in e.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            assert isinstance(value, ast.FormattedValue)
            inner = plain(self.eval(value.value, frame, state))
            if not known(inner) or not isinstance(inner, (str, int, float, bool)) or value.format_spec is not None:
                return UNKNOWN
            parts.append(repr(inner) if value.conversion == ord("r") else str(inner))
            chars = sum(map(len, parts))
            if chars > MAX_ITEMS:
                return UNKNOWN
            self.charge(chars)
        return "".join(parts)

    def _e_boolop(self, e: ast.BoolOp, frame: Frame, state: State) -> Any:
        stop = isinstance(e.op, ast.Or)  # `or` stops at the first truthy value, `and` at the first falsy one
        undecided: list[Any] = []
        value: Any = None
        for operand in e.values:
            value = self._branch_value(operand, frame, state) if undecided else self.eval(operand, frame, state)
            if isinstance(value, _Raised):  # reached only past an undecided operand: the result is one of those
                self._side_raised(value, state)
                return self._either(undecided)
            truth = self.truth(value, frame, state)
            if truth is UNKNOWN and isinstance(value, OneOf) and operand is not e.values[-1]:
                # one of a few values: only those that stop the chain can be its result (`x is not None and ...`)
                stopping = [x for x in value.options if self.truth(x, frame, state) is not (not stop)]
                undecided.append(join_values([(with_labels(x, value.labels), frozenset()) for x in stopping]))
                continue
            if truth is UNKNOWN:
                # an operand that is a bool (`x is not None`, `not y`, `isinstance(...)`) is the result only as the
                # bool that stops the chain; so is a comparison, whose value here has a truth (a tensor's
                # comparison that stops a chain is one element, which reads as that bool)
                as_bool = _a_bool(operand) or isinstance(operand, ast.Compare)
                undecided.append(with_labels(stop, labels_of(value)) if as_bool else value)
            elif truth is stop:
                if not undecided:
                    return value
                if self.semantics.join == "unknown":  # the truth is decided, the exact value only if it is a bool
                    return stop if isinstance(plain(value), bool) else UNKNOWN
                if isinstance(plain(value), bool) and all(is_unknown(plain(u)) for u in undecided):
                    # an unknown operand is the result only where it stops the chain too: the truth is decided
                    # (`flag and not dp_enabled` is false with DP on), and a bool stands for it
                    return with_labels(stop, frozenset().union(*map(labels_of, [*undecided, value])))
                # An undecided operand came first: the result is that operand or this one.
                return self._either([*undecided, value])
        return self._either([*undecided, value]) if undecided else value

    def _either(self, values: list[Any]) -> Any:
        if self.semantics.join == "unknown":
            return self.join([(v, frozenset()) for v in values])
        inner = [plain(v) for v in values]
        if all(isinstance(v, bool) for v in inner) and len(set(inner)) == 1:
            return with_labels(inner[0], frozenset().union(*map(labels_of, values)))
        if all(isinstance(plain(v), bool) or is_unknown(plain(v)) for v in values) and not any(
            labels_of(v) or maybe_of(v) for v in values
        ):
            return UNKNOWN
        return join_values([(v, frozenset()) for v in values])

    def _e_unaryop(self, e: ast.UnaryOp, frame: Frame, state: State) -> Any:
        value = self.eval(e.operand, frame, state)
        labels = self.provenance(value)
        if isinstance(e.op, ast.Not):
            truth = self.truth(value, frame, state)
            if truth is UNKNOWN:
                return unknown_from(value, keep=frozenset(x.kind for x in labels))
            return with_labels(not truth, labels)
        inner = plain(value)
        if isinstance(inner, Sym) and isinstance(e.op, ast.USub):  # `-n` of a named unknown is named too
            return Sym(inner.name[1:] if inner.name.startswith("-") else f"-{inner.name}", inner.labels)
        if not known(inner) or not isinstance(inner, (int, float)):
            return unknown_from(value, keep=frozenset(x.kind for x in labels_of(value)))
        if isinstance(e.op, ast.USub):
            return with_labels(-inner, labels_of(value))
        if isinstance(e.op, ast.UAdd):
            return with_labels(+inner, labels_of(value))
        if isinstance(e.op, ast.Invert) and isinstance(inner, int):
            return with_labels(~inner, labels_of(value))
        return UNKNOWN

    def _e_binop(self, e: ast.BinOp, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        right = self.eval(e.right, frame, state)
        if isinstance(e.op, ast.BitOr) and (isinstance(left, LiteralType) or isinstance(right, LiteralType)):
            values = tuple(
                (left.values if isinstance(left, LiteralType) else ())
                + (right.values if isinstance(right, LiteralType) else ())
            )
            return LiteralType(values)
        result = self.binop_at(e.op, left, right, state)
        if not isinstance(e.op, (ast.FloorDiv, ast.Div, ast.Mult)) or not is_unknown(plain(result)):
            return result
        return self._rounding(e.op, _divisor_key(left, e.left), _divisor_key(right, e.right), left, right, result)

    def binop_at(self, op: ast.operator, left: Any, right: Any, state: State) -> Any:
        """`binop` in a statement: where some of the values an operand may be raise (a division by one of a few
        divisors, one of them 0), the path that takes those ends in that raise, and the value is the others'."""
        mark = len(self.raised_aside)
        result = self.binop(op, left, right)
        for raised in self.raised_aside[mark:]:
            self._side_raised(_Raised(raised), state)
        del self.raised_aside[mark:]
        return result

    def binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        """Arithmetic: known operands give the result, which keeps every label of both; an unknown operand gives an
        unknown that keeps them too (a padded count plus one is still padded)."""
        for side in (left, right):
            if isinstance(side, OneOf):
                other = right if side is left else left
                results, raised = [], None
                for x in side.options:
                    option = with_labels(x, side.labels)
                    try:
                        results.append(self.binop(op, option, other) if side is left else self.binop(op, other, option))
                    except PathEnds as ends:  # this one raises (`n // d`, d one of 0 and 3): its path ends there
                        raised = ends
                if raised is not None and not results:
                    raise raised
                if raised is not None:
                    self.raised_aside.append(raised.raised)  # the statement's own raise (see `_e_binop`)
                return join_values([(r, frozenset()) for r in results])
        labels = labels_of(left) | labels_of(right) if _labelled(left, right) else frozenset()
        a, b = plain(left), plain(right)
        spaced = [x for x in (a, b) if isinstance(x, Abstract) and x.step is not None]
        if isinstance(op, ast.Mult) and len(spaced) == 1:  # an evenly spaced array times a number: spaced wider
            array, factor = (a, right) if a is spaced[0] else (b, left)
            if not isinstance(plain(factor), (Many, list, tuple)):
                widened = unknown_from(left, right, keep=frozenset(x.kind for x in labels))
                return Abstract(
                    labels_of(widened),
                    maybe_of(widened),
                    why_of(widened),
                    array.length,
                    step=self.binop(op, array.step, factor),
                )
        if isinstance(op, ast.Mult) and (isinstance(a, list) or isinstance(b, list)):
            seq, count = (a, b) if isinstance(a, list) else (b, a)
            if not known(count):
                element = join_values([(v, frozenset()) for v in seq]) if seq else UNKNOWN
                return Many(element, labels_of(count))
        fn = _BINOPS.get(type(op))
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and _zero(b) and a is UNKNOWN:
            return self.fails("ZeroDivisionError")  # whatever number it divides (an array is not a bare unknown)
        if fn is None or not known(a) or not known(b):
            kinds = frozenset(x.kind for x in labels)
            return unknown_from(left, right, keep=kinds)
        if not all(isinstance(v, (int, float, str, tuple, list, set, frozenset)) for v in (a, b)):
            return UNKNOWN
        if too_costly(op, a, b):
            return UNKNOWN
        self.charge(result_size(op, a, b) or 0)
        try:
            result = fn(a, b)
        except (ZeroDivisionError, TypeError, ValueError, OverflowError) as exc:
            return self.fails(type(exc).__name__)  # what Python raises for these known operands
        return with_labels(result, labels)

    def builtin(
        self, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        torch_call = name.startswith("torch.") and len(args) == 2
        op = division_operator(name.rpartition(".")[2], kwargs) if torch_call else None
        if op is not None and isinstance(node, ast.Call) and len(node.args) == 2:
            return self._divided(op, args[0], args[1], node.args[0], node.args[1])  # `torch.div(a, b, ...)`
        return super().builtin(name, args, kwargs, node, frame, state)

    def unknown_method(self, method: Method, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        op = division_operator(method.name, kwargs) if len(args) == 1 else None
        if op is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            return self._divided(op, method.receiver, args[0], node.func.value, node.args[0])  # `a.div(b)`
        return super().unknown_method(method, args, kwargs, node)

    def _divided(self, op: ast.operator, left: Any, right: Any, left_node: ast.expr, right_node: ast.expr) -> Any:
        """A tensor's division written as a call: what `left / right` (`//` for a floor or truncating rounding)
        is, quotient's divisor included."""
        result = self.binop(op, left, right)
        if not is_unknown(plain(result)):
            return result
        return self._rounding(op, _divisor_key(left, left_node), _divisor_key(right, right_node), left, right, result)

    def _rounding(
        self, op: ast.operator, left_key: str | None, right_key: str | None, left: Any, right: Any, result: Any
    ) -> Any:
        """An unknown quotient remembers its divisor; an unknown product by the divisor of a quotient it holds is a
        multiple of it: the client says what that adds (a count rounded up to an alignment is padded). A divisor is
        known by its value where it has an identity (a number, a named unknown), else by the variable read."""
        if isinstance(op, (ast.FloorDiv, ast.Div)):
            if right_key is None:
                return result
            return with_labels(
                result, frozenset({Label(QUOTIENT, right_key)}) | self.hooks.divided(self, result, right_key)
            )
        if isinstance(op, ast.Mult):
            for value, key in ((left, right_key), (right, left_key)):
                if key is not None and any(x.kind == QUOTIENT and x.text == key for x in labels_of(value)):
                    return with_labels(result, self.hooks.rounded(self, result, key))  # type: ignore[arg-type]
        return result

    def _e_ifexp(self, e: ast.IfExp, frame: Frame, state: State) -> Any:
        test = self.eval(e.test, frame, state)
        truth = self.truth(test, frame, state)
        if truth is True:
            return self.eval(e.body, frame, state)
        if truth is False:
            return self.eval(e.orelse, frame, state)
        noting = self.choosing(frame)
        side = noting.take(e.test, frame, state) if noting is not None else None
        if side is not None:  # path by path (see `choices`): this run takes one side
            return self.eval(e.body if side else e.orelse, frame, state)
        with joined(noting):
            a, b = self._branch_value(e.body, frame, state), self._branch_value(e.orelse, frame, state)
        if noting is not None:  # where it matters path by path
            noting.note_values(e.test, a, b)
        if isinstance(a, _Raised) and isinstance(b, _Raised):
            raise PathEnds(None if a.raised is None or b.raised is None else a.raised | b.raised)
        if isinstance(a, _Raised) or isinstance(b, _Raised):  # one side raises: the value is the other's
            self._side_raised(a if isinstance(a, _Raised) else b, state)
            return b if isinstance(a, _Raised) else a
        if self.is_doubt(test):
            cond = self.cond(e.test, frame.module)
            return self.join([(a, frozenset({(cond, True)})), (b, frozenset({(cond, False)}))])
        return self.join([(a, frozenset()), (b, frozenset())])

    def _branch_value(self, e: ast.expr, frame: Frame, state: State) -> Any:
        try:
            return self.eval(e, frame, state)
        except PathEnds as ends:
            return _Raised(ends.raised)

    def _side_raised(self, side: _Raised, state: State) -> None:
        """A side of an undecided choice inside an expression raises: the path that takes it ends there, a raise
        of the statement holding the expression (its block adds it to its flow), while the expression's value is
        the other side's."""
        if self.raise_ends_path:
            self.side_raises.append(replace(state.copy(), raised=side.raised))

    def _e_namedexpr(self, e: ast.NamedExpr, frame: Frame, state: State) -> Any:
        value = self.eval(e.value, frame, state)
        self.assign(e.target, value, frame, state, e)
        return value

    def _e_subscript(self, e: ast.Subscript, frame: Frame, state: State) -> Any:
        base = self.eval(e.value, frame, state)
        inner = plain(base)
        if isinstance(inner, Opaque) and inner.name.rpartition(".")[2] == "Literal":
            elts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            values: list[Any] = []
            for elt in elts:
                v = self.eval(elt, frame, state)
                values.extend(v.values if isinstance(v, LiteralType) else [v])
            return LiteralType(tuple(values))
        if isinstance(inner, Opaque) and inner.name.rpartition(".")[2] in ("Annotated", "ClassVar", "Final"):
            first = e.slice.elts[0] if isinstance(e.slice, ast.Tuple) else e.slice
            return self.eval(first, frame, state)
        if isinstance(e.slice, ast.Slice):
            if not isinstance(inner, (list, tuple, str)) and not _is_object(inner):
                self.may_raise(e, frame, state, _SLICE_ERRORS, point=True)  # a slice of what may be None, in a `try`
            return self._slice(base, e.slice, frame, state)
        key = self.eval(e.slice, frame, state)
        if _may_miss(inner, plain(key)):  # a lookup in a `try` may be what its handler catches
            self.may_raise(e, frame, state, _LOOKUP_ERRORS, point=True)
        answered = self.hooks.subscript(self, base, key, e)  # type: ignore[arg-type]
        return answered if answered is not NOT_HANDLED else self.subscript(base, key, e, frame, state)

    def subscript(self, base: Any, key: Any, node: ast.AST | None, frame: Frame, state: State) -> Any:
        inner, k = plain(base), plain(key)
        if isinstance(inner, ClassRef) and self.tree.is_enum(inner.info):
            if not isinstance(k, str):
                return UNKNOWN
            if k in self.tree.enum_members(inner.info):
                return EnumMember(inner.info, k)
            self.record(
                "raise", frame.module, node, f"KeyError: {k!r} is not a member of {inner.info.name}", state.path
            )
            return UNKNOWN
        if isinstance(inner, Many):
            return with_labels(inner.element, inner.labels)
        if isinstance(inner, Mapping):
            return with_labels(inner.value, inner.labels)
        if isinstance(inner, Obj) and inner.cls is not None and self.named_tuple(inner.cls):
            inner = tuple(self.iterate(base) or ())  # a `NamedTuple` indexes as the tuple of its fields
        if isinstance(inner, Abstract) and inner.step is not None:
            element = self._spaced_element(inner, key)
            if element is not None:
                return element
        if isinstance(inner, Sym) and isinstance(node, ast.Subscript) and not known(k):
            # an element of a named container by a key this code names (`self.graph_metadata[bs]`): one object
            # wherever the function reads it so, as `name.attr` is
            return Sym(f"{inner.name}[{ast.unparse(node.slice)}]", inner.labels)
        if is_unknown(inner):  # an element of an unknown container: derived from it
            return unknown_from(base, key, keep=frozenset(x.kind for x in labels_of(base)))
        if not known(k):  # any of its elements: each one is walked
            if isinstance(inner, (list, tuple)) and inner:
                self.charge(len(inner))
                labels = labels_of(base)
                return join_values([(with_labels(v, labels), frozenset()) for v in inner])
            if isinstance(inner, dict) and inner:
                self.charge(len(inner))
                return join_values([(v, frozenset()) for v in inner.values()])
            return unknown_from(base, key)
        if isinstance(inner, dict):
            if k in inner:
                return inner[k]
            return self.refuses("KeyError", f"KeyError: {k!r}", node, frame, state)
        if isinstance(inner, (list, tuple, str)) and isinstance(k, int):
            if -len(inner) <= k < len(inner):
                return with_labels(inner[k], self.provenance(base))
            return self.fails("IndexError")
        return UNKNOWN

    def refuses(self, error: str, message: str, node: ast.AST | None, frame: Frame, state: State) -> Any:
        """`fails`, for an operation of the evaluated code whose refusal is worth a verdict (a missing key, data a
        parser refuses): where raises are outcomes, it is recorded as one, as the source's own raises are."""
        if not self.semantics.raise_ends_path:
            self.record("raise", frame.module, node, message, state.path)
        return self.fails(error)

    def fails(self, error: str) -> Any:
        """A known operation that raises `error` in Python (a division by zero, a missing key): its path ends there
        as a raise, or, where raises do not end paths (the config pre-flight), its value is unknown."""
        if self.raise_ends_path:
            raise PathEnds(exceptions.python_lineage(error))
        return UNKNOWN

    def _spaced_element(self, array: Abstract, key: Any) -> Any:
        """Element `key` of an evenly spaced array from 0: `key` times its step (the last, `[-1]`, is its length
        less one times it); None where that is not known (another negative index, a slice)."""
        k = plain(key)
        if isinstance(k, bool) or not (isinstance(k, int) or isinstance(k, Abstract) and k.step is None):
            return None
        if isinstance(k, int) and k < 0:
            if k != -1 or array.length is None:
                return None
            key = self.binop(ast.Sub(), array.length, 1)
        return self.binop(ast.Mult(), key, array.step)

    def _slice(self, base: Any, node: ast.Slice, frame: Frame, state: State) -> Any:
        lower = self.eval(node.lower, frame, state) if node.lower is not None else None
        upper = self.eval(node.upper, frame, state) if node.upper is not None else None
        step = self.eval(node.step, frame, state) if node.step is not None else None
        inner = plain(base)
        if isinstance(inner, (list, tuple, str)) and all(known(plain(x)) for x in (lower, upper, step)):
            try:
                return with_labels(inner[slice(plain(lower), plain(upper), plain(step))], labels_of(base))
            except (TypeError, ValueError):
                return UNKNOWN
        if isinstance(inner, Many):
            return inner
        # `buf[:n]` of a buffer: a view of length n (the evaluator keeps n, labels included, for `len` and `.shape`)
        length = upper if lower in (None, 0) and step in (None, 1) and upper is not None else None
        spaced = inner.step if isinstance(inner, Abstract) and length is not None else None  # still from 0
        return Abstract(labels_of(base), maybe_of(base), why_of(base), length, step=spaced)

    def _e_compare(self, e: ast.Compare, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        result: Any = True
        for op, comparator in zip(e.ops, e.comparators, strict=True):
            right = self.eval(comparator, frame, state)
            outcome = self.compare(op, left, right)
            if plain(outcome) is False:
                return outcome
            result = (
                outcome
                if result is True
                else self._either([result, outcome])
                if not is_unknown(plain(result))
                else result
            )
            left = right
        if is_unknown(plain(result)) and not labels_of(result) and _with_a_string(e):
            # a string compared by value (`os.environ.get(...) == "1"`): a bool the evaluation cannot tell, so that
            # `that and not dp_attention_on()` is false whichever it is
            return _EITHER_BOOL
        return result

    def _e_lambda(self, e: ast.Lambda, frame: Frame, state: State) -> Any:
        return Function(frame.module, e, None, enclosing(frame, dict(state.locals)))

    def _e_await(self, e: ast.Await, frame: Frame, state: State) -> Any:
        return self.eval(e.value, frame, state)

    def _e_yield(self, e: ast.Yield | ast.YieldFrom, frame: Frame, state: State) -> Any:
        """What a generator yields is what it is: each value is noted, with the path it is yielded on. What the
        consumer sends back is not known."""
        value = self.eval(e.value, frame, state) if e.value is not None else None
        if isinstance(e, ast.YieldFrom):
            value = self.element_of(value)
        if self.yields:
            self.yields[-1].append((value, state.path))
            self.yield_writes[-1].append(State({}, dict(state.writes), state.path))
        return UNKNOWN

    def _e_starred(self, e: ast.Starred, frame: Frame, state: State) -> Any:
        return self.eval(e.value, frame, state)

    def _kept_at_least(self, cond: ast.expr, targets: set[str], frame: Frame, state: State) -> None:
        """An element kept by `x >= n` (`n <= x`, `>`) of what cannot be enumerated is known to be at least `n`:
        what the client makes of that (a size chosen for a count is larger than the count, perhaps)."""
        if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1):
            return
        op, left, right = cond.ops[0], cond.left, cond.comparators[0]
        if isinstance(op, (ast.GtE, ast.Gt)) and isinstance(left, ast.Name):
            name, bound = left.id, right
        elif isinstance(op, (ast.LtE, ast.Lt)) and isinstance(right, ast.Name):
            name, bound = right.id, left
        else:
            return
        limit = self.eval(bound, frame, state)
        if name in targets and name in state.locals and not known(plain(limit)):  # chosen for a count, not a number
            value = state.locals[name]
            state.locals[name] = with_labels(value, self.hooks.at_least(self, value, limit, cond))

    def _comprehension(
        self, e: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, frame: Frame, state: State
    ) -> Any:
        """The elements, when every generator runs over a known sequence; otherwise an unknown collection whose
        element is evaluated once, with the loop variables standing for any element."""
        # its loop variables are its own (`inner`'s locals); what it writes into objects is the caller's too
        inner = state.copy()
        results: list[Any] | None = []
        self._generate(e, list(e.generators), frame, inner, results, 1)
        if results is None or (results and results[-1] is STAR_UNKNOWN):
            once = state.copy()
            element = self._element_once(e, frame, once)
            # run for any element, or for none: what it writes may have been written
            take_writes(state, merge([State({}, state.writes, state.path), State({}, once.writes, state.path)]))
            return Many(element)
        state.writes.update(inner.writes)
        return results

    def _generate(
        self, e: Any, generators: list[ast.comprehension], frame: Frame, state: State, out: list[Any], rounds: int
    ) -> None:
        """The elements of the comprehension, into `out`; `rounds`: how often this generator runs (the sizes of the
        sources around it, multiplied). A source is sized before it is walked: when every round of it would walk
        more than the largest value holds, the comprehension is an unknown collection without walking it."""
        if out and out[-1] is STAR_UNKNOWN:
            return
        if not generators:
            element = (
                (self.eval(e.key, frame, state), self.eval(e.value, frame, state))
                if isinstance(e, ast.DictComp)
                else self.eval(e.elt, frame, state)
            )
            out.append(element)
            self.charge(1)
            if len(out) > (MAX_ITERATIONS if self.work is None else MAX_ITEMS):  # where work is counted, it bounds
                out.append(STAR_UNKNOWN)
            return
        gen, rest = generators[0], generators[1:]
        source = self.eval(gen.iter, frame, state)
        sized = plain(source)
        if isinstance(sized, (dict, list, tuple, set, frozenset, str)) and too_large(rounds * len(sized)):
            out.append(STAR_UNKNOWN)
            return
        items = self.iterate(source)
        if items is None or gen.is_async:
            out.append(STAR_UNKNOWN)
            return
        for item in items:
            self.step()
            self.assign(gen.target, item, frame, state, e)
            keep: Any = True
            for cond in gen.ifs:
                truth = self.truth(self.eval(cond, frame, state), frame, state)
                if truth is UNKNOWN:
                    keep = UNKNOWN
                elif truth is False:
                    keep = False
                    break
            if keep is False:
                continue
            if keep is UNKNOWN and isinstance(e, ast.DictComp) and not rest:
                # An entry the filter may drop (`if is_init_field(cls, k)`) is kept with its key and value, as a
                # dict of unknown size holds its element: a copy of an object's fields keeps what they derive
                # from instead of losing the whole dict.
                out.append((self.eval(e.key, frame, state), self.eval(e.value, frame, state)))
                self.charge(1)
                continue
            if keep is UNKNOWN:
                out.append(STAR_UNKNOWN)
                return
            self._generate(e, rest, frame, state, out, rounds * len(items))
            if out and out[-1] is STAR_UNKNOWN:
                return

    def _element_once(self, e: Any, frame: Frame, state: State) -> Any:
        for gen in e.generators:
            iterable = self.eval(gen.iter, frame, state)
            self.assign(gen.target, self.element_of(iterable), frame, state, e)
            targets = {n.id for n in walked(gen.target) if isinstance(n, ast.Name)}
            for cond in gen.ifs:
                self.eval(cond, frame, state)
                self._kept_at_least(cond, targets, frame, state)
        if isinstance(e, ast.DictComp):
            return (self.eval(e.key, frame, state), self.eval(e.value, frame, state))
        return self.eval(e.elt, frame, state)

    def _e_listcomp(self, e: ast.ListComp, frame: Frame, state: State) -> Any:
        return self._comprehension(e, frame, state)

    def _e_generatorexp(self, e: ast.GeneratorExp, frame: Frame, state: State) -> Any:
        return self._comprehension(e, frame, state)

    def _e_setcomp(self, e: ast.SetComp, frame: Frame, state: State) -> Any:
        values = self._comprehension(e, frame, state)
        return self.make_set(values) if isinstance(values, list) else values

    def _e_dictcomp(self, e: ast.DictComp, frame: Frame, state: State) -> Any:
        pairs = self._comprehension(e, frame, state)
        if isinstance(pairs, Many) and isinstance(pairs.element, tuple):  # over a collection of unknown size
            return Mapping(*pairs.element)
        if not isinstance(pairs, list):
            return UNKNOWN
        out = {}
        for key, value in pairs:
            if not known(plain(key)):
                return _mapping(pairs)
            out[plain(key)] = value
        return out


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


_MAX_SHIFT = 4096


class _Raised:
    """An alternative that raises: the names of the class it raises and of its bases (None: not known)."""

    __slots__ = ("raised",)

    def __init__(self, raised: set[str] | None) -> None:
        self.raised = raised


def too_costly(op: ast.operator, left: Any, right: Any) -> bool:
    """A result the evaluator does not build: larger than the budget's caps (see `budget.result_size`), or a shift
    that would be."""
    if isinstance(op, ast.LShift):
        return not isinstance(right, int) or right > _MAX_SHIFT
    return result_size(op, left, right) is None


def _labelled(*values: Any) -> bool:
    return any(isinstance(v, (Tagged, Abstract, Sym, Many, Obj)) for v in values)


def _mapping(pairs: list[tuple[Any, Any]]) -> Mapping:
    """The dict these pairs make where some key is unknown: any value may be under any key."""
    keys = join_values([(k, frozenset()) for k, _ in pairs])
    return Mapping(keys, join_values([(v, frozenset()) for _, v in pairs]))


_DIVISIONS = {"div": ast.Div, "divide": ast.Div, "true_divide": ast.Div, "floor_divide": ast.FloorDiv}


def division_operator(name: str, kwargs: dict[str, Any]) -> ast.operator | None:
    """The operator a tensor's division call (`torch.div`, `x.floor_divide`) computes; None for any other call."""
    kind = _DIVISIONS.get(name)
    if kind is None or set(kwargs) - {"rounding_mode"}:
        return None
    rounding = plain(kwargs.get("rounding_mode"))
    if rounding in ("floor", "trunc"):
        return ast.FloorDiv()
    return kind() if rounding is None else None


def _divisor_key(value: Any, node: ast.expr) -> str | None:
    """What names a divisor up to its sign: its value's identity, else the variable (or attribute) read."""
    found = divisor_identity(value)
    if found is not None:
        return found
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    text = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return text or None


def _zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == 0


_BOOL_CALLS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "bool"})


def _a_bool(e: ast.expr) -> bool:
    """An expression whose value is a bool whatever its operands are (`==` is not: a tensor's is a tensor)."""
    if isinstance(e, ast.Compare):
        return all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops)
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, ast.Not)
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _BOOL_CALLS


_SLICE_ERRORS = exceptions.python_lineage("TypeError")  # what `x[a:b]` raises where `x` cannot be sliced (None)
# What a lookup `x[k]` raises where `k` is not in `x` (or `x` cannot be indexed), with their bases.
_LOOKUP_ERRORS = exceptions.python_lineage("KeyError") | exceptions.python_lineage("IndexError") | _SLICE_ERRORS


def _may_miss(container: Any, key: Any) -> bool:
    """Whether `container[key]` may raise where the evaluation cannot tell: a lookup in a mapping or sequence it
    does not hold whole, or by a key it does not know. A known key of a held dict or sequence is decided where it
    is looked up (a missing one is a raise of its own); a tensor's index is its shape's business, not a lookup."""
    if isinstance(container, (dict, list, tuple, str)):
        return not known(key)
    return not isinstance(container, Abstract)


_EITHER_BOOL = OneOf((False, True))


def _with_a_string(e: ast.Compare) -> bool:
    """A comparison by value with a string literal on one side: its result is a bool, whatever the other side is."""
    sides = (e.left, *e.comparators)
    by_value = all(isinstance(op, (ast.Eq, ast.NotEq)) for op in e.ops)
    return by_value and any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in sides)


def _is_object(value: Any) -> bool:
    """An unknown known to be an object, never None: one said to exist, of a class, or of a known length."""
    return isinstance(value, Abstract) and not anonymous(value)

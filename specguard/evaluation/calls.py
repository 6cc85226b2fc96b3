"""Calls: a callee resolved, its arguments bound as Python binds them, the source's functions inlined under the
depth and budget limits (or left unknown, said why), classes instantiated. A mixin of `evaluator.Evaluator`."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from specguard.evaluation.answers import answer
from specguard.evaluation.builtins import Builtins
from specguard.evaluation.nodes import dropped_calls, own_nodes, stores_state
from specguard.evaluation.paths import (
    Frame,
    PathEnds,
    State,
    join_values,
    merge,
    merge_agreed,
    take_writes,
)
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    STAR_UNKNOWN,
    UNKNOWN,
    Bound,
    ClassRef,
    Function,
    Many,
    Mapping,
    Method,
    Obj,
    OneOf,
    Opaque,
    Partial,
    PyMethod,
    TypeOf,
    answer_key,
    is_unknown,
    labels_of,
    maybe_of,
    plain,
    traced,
    unknown_from,
    with_labels,
)
from specguard.program.ast_tools import cached_on, dotted, walked
from specguard.program.tree import message_of


class Calls(Builtins):
    """How the evaluator follows a call."""

    # ---- calls ----------------------------------------------------------------------------------------------

    def _owns(self, self_value: Any) -> bool:
        return self.own_calls and self_value is not None and plain(self_value) is self.lazy_owner

    def _e_call(self, e: ast.Call, frame: Frame, state: State) -> Any:
        if not self.inline_unused and id(e) in self._dropped and self._module_level(e.func, frame, state):
            values = [self.eval(a.value if isinstance(a, ast.Starred) else a, frame, state) for a in e.args]
            values += [self.eval(kw.value, frame, state) for kw in e.keywords]
            if not any(labels_of(v) or maybe_of(v) for v in values) and not (values and self._owns(values[0])):
                return UNKNOWN  # a module function whose result is dropped and that gets nothing labelled (and not
                # a class's function handed the instance whose writes are asked: `Base.__init__(self, ...)`)
        if isinstance(e.func, ast.Attribute):
            receiver = self.eval(e.func.value, frame, state)
            func = self.getattr(receiver, e.func.attr, state, frame.depth, node=e.func)
            if is_unknown(plain(func)) and not _any_callable(func):  # a method of something it cannot see into
                func = Method(receiver, e.func.attr)
        else:
            func = self.eval(e.func, frame, state)
        args: list[Any] = []
        for arg in e.args:
            if isinstance(arg, ast.Starred):
                items = self.iterate(self.eval(arg.value, frame, state))
                if items is None:
                    args.append(STAR_UNKNOWN)
                else:
                    args.extend(items)
            else:
                args.append(self.eval(arg, frame, state))
        kwargs: dict[str, Any] = {}
        reads = self.hooks.reads(self, func)
        for kw in e.keywords:
            if reads is not None and kw.arg is not None and kw.arg not in reads and _pure(kw.value):
                kwargs[kw.arg] = UNKNOWN  # the hooks answer this call without reading it
                continue
            value = self.eval(kw.value, frame, state)
            if kw.arg is None:
                inner = plain(value)
                if isinstance(inner, dict) and all(isinstance(k, str) for k in inner):
                    if isinstance(kw.value, ast.Name) and self.hooks.traced:
                        hop = f"`{kw.value.id}` ({self.place(frame, kw.value)})"
                        inner = {k: traced(v, hop, self.hooks.traced) for k, v in inner.items()}
                    kwargs.update(inner)
                else:
                    kwargs[STAR_KWARGS] = value
            else:
                kwargs[kw.arg] = value
        if _any_callable(func):  # each is called as written here: a client sees each call
            return _joined_calls(func, lambda option: self._dispatch(option, args, kwargs, e, frame, state))
        return self._dispatch(func, args, kwargs, e, frame, state)

    def _spread_value(self, spread: Any) -> Any:
        """What a parameter may get from a `**` mapping the evaluation cannot list: one of its values (iterating a
        mapping gives its keys; binding gives the value under the parameter's name)."""
        inner = plain(spread)
        if isinstance(inner, Mapping):
            return with_labels(inner.value, inner.labels)
        return self.element_of(spread)

    def _dispatch(
        self, func: Any, args: list[Any], kwargs: dict[str, Any], e: ast.Call, frame: Frame, state: State
    ) -> Any:
        """A call written in the code, its callee and arguments evaluated: the client's answer, or the call. A
        client that asks (`Hooks.through_partials`) is asked about the function a `functools.partial` reaches, with
        every argument it gets."""
        inner = plain(func)
        while self.hooks.through_partials and isinstance(inner, Partial):
            func, args, kwargs = inner.func, [*inner.args, *args], {**inner.kwargs, **kwargs}
            inner = plain(func)
        answered = self.hooks.call(self, func, args, kwargs, e, frame, state)
        asked = answer_key(func) if isinstance(answered, bool) and not args and not kwargs else None
        if asked is not None:
            answer(state, asked, answered)
        if answered is not NOT_HANDLED:
            # answered, not read: it may raise like any call not read; but what it does is the client's question,
            # so where its `try` ends otherwise in a handler, the client takes its raise path by path
            self.may_raise(e, frame, state, point=True)
            return answered
        if self.hook is not None:
            handled = self.hook(self, func, args, kwargs, e, frame, state)
            if handled is not NOT_HANDLED:
                return handled
        if id(e) in self.watch_calls:  # before it could be taken for a logging call
            self.record("call", frame.module, e, "", state.path, (func, args, kwargs))
            return UNKNOWN  # the caller only wants to know the call happens, and with what
        if (
            isinstance(e.func, ast.Attribute)
            and e.func.attr.startswith("warn")
            and (self.semantics.warn_by_name or not isinstance(func, (Function, Bound)))
        ):
            # `logger.warning(...)`, `logger.warning_once(...)`, `warnings.warn(...)`: whatever the logger is.
            self.record("warning", frame.module, e, message_of(e), state.path)
            return None
        return self.call(func, args, kwargs, e, frame, state)

    def _module_level(self, func: ast.expr, frame: Frame, state: State) -> bool:
        """Whether a callee is named through a module's globals (not a local, not an attribute of an object)."""
        while isinstance(func, ast.Attribute):
            func = func.value
        if not isinstance(func, ast.Name) or func.id in state.locals:
            return False
        return frame.closure is None or func.id not in frame.closure

    def call(
        self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        func = plain(func)
        asked = answer_key(func) if not args and not kwargs else None
        if asked is not None and asked in state.writes:
            return state.writes[asked]  # a question a test on this path answered (see `narrow`)
        if _any_callable(func):  # a builder picked from a dict, a method of an optional object
            return _joined_calls(func, lambda option: self.call(option, args, kwargs, node, frame, state))
        if isinstance(func, Partial):
            return self.call(func.func, [*func.args, *args], {**func.kwargs, **kwargs}, node, frame, state)
        if isinstance(func, Bound):
            return self._invoke(func.func, func.self_value, args, kwargs, state, frame.depth + 1, node)
        if isinstance(func, Function):
            return self._invoke(func, None, args, kwargs, state, frame.depth + 1, node)
        if isinstance(func, PyMethod):
            return self.py_method(func, args, kwargs)
        if isinstance(func, Opaque):
            result = self.builtin(func.name, args, kwargs, node, frame, state)
            if not self.evaluates(func.name):
                self.unresolved(node, frame, state, [*args, *kwargs.values()])
            return result
        if isinstance(func, ClassRef):
            return self.instantiate(func.info, args, kwargs, node, frame, state)
        if isinstance(func, Obj) and func.cls is not None:
            found = self.tree.method(func.cls, "__call__")  # an instance called: its class's `__call__`
            if found is not None:
                method, owner = found
                return self._invoke(
                    Function(self.tree.module(owner.module), method, owner),
                    func,
                    args,
                    kwargs,
                    state,
                    frame.depth + 1,
                    node,
                )
        if isinstance(func, TypeOf) and not args:
            like = func.instance
            return Obj(None, dict(kwargs), like.defaults, like.label, like.pinned, like.labels)
        if isinstance(func, Method):
            self.unresolved(node, frame, state, [func.receiver, *args, *kwargs.values()])
            return self.unknown_method(func, args, kwargs, node)
        self.unresolved(node, frame, state, [func, *args, *kwargs.values()])
        return unknown_from(func, *args, *kwargs.values(), why=f"cannot resolve the call `{_text(node)}`")

    def unresolved(self, node: ast.AST, frame: Frame, state: State, values: list[Any]) -> None:
        """A call the evaluator does not follow. Inside a `try`, it may raise what a handler catches: a path into
        the handlers, under the condition that it raised (so what a handler does is undecided, never silent).
        Where its arguments hold the question's subject (`Hooks.unresolved_may_raise`), also inside objects and
        containers (the specs whose fields are the flags), the path goes on under the condition that it returned."""
        self.may_raise(node, frame, state)
        if self.hooks.unresolved_may_raise and any(self._holds_doubt(v, 0) for v in values):
            state.path = state.path | {(self.cond(node, frame.module, "call"), True)}

    def may_raise(
        self, node: ast.AST, frame: Frame, state: State, raised: set[str] | None = None, point: bool = False
    ) -> None:
        """Inside a `try`, a path into its handlers where `node` raised (`raised`: the classes it can raise, with
        their bases; None: any). `point`: a raise a run that takes paths one by one may take apart (a lookup's
        miss, a call the client answered: see `_raise_pending`)."""
        if self._trying and self.raise_ends_path:
            cond = (self.cond(node, frame.module, "call"), False)
            self._pending.append((state.path | {cond}, raised, node if point else None))

    def _holds_doubt(self, value: Any, depth: int) -> bool:
        if self.is_doubt(value):
            return True
        value = plain(value)
        if depth >= 2:
            return False
        if isinstance(value, Obj):
            items = list(value.fields.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
        elif isinstance(value, dict):
            items = list(value.values())
        else:
            return False
        return any(self._holds_doubt(item, depth + 1) for item in items[:64])

    def _invoke(
        self,
        func: Function,
        self_value: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        state: State,
        depth: int,
        node: ast.AST | None = None,
        force: bool = False,
    ) -> Any:
        if not force:
            if depth > self.max_depth:
                return self.not_followed(func, args, kwargs, f"calls are followed {self.max_depth} deep")
            if self._active.get(id(func.node), 0) >= 2:
                return self.not_followed(func, args, kwargs, f"`{func.qualname}` calls itself")
            if (
                not self.inline_unused
                and node is not None
                and id(node) in self._dropped
                and not any(labels_of(v) or maybe_of(v) for v in [self_value, *args, *kwargs.values()])
                # a method that stores state is followed, except in a writer's run (it reads attributes lazily)
                # where only the instance's own (`self._init_policy(True)`, `super().__init__(...)`) is, for a
                # client that asks for constructors run whole
                and not (
                    stores_state(func.node)
                    # the instance's own: a bound call, or its class's function handed it (`Base.__init__(self)`)
                    and (self.lazy_owner is None or self._owns(self_value if self_value is not None else _first(args)))
                )
            ):
                return UNKNOWN
        bindings = self.bind(func, self_value, args, kwargs, depth)
        inner = State(bindings, state.writes, state.path)
        frame = Frame(func.module, func.owner, func.closure, depth)
        if isinstance(func.node, ast.Lambda):
            # (its call is one the judged function makes, as a def's is: a client names the outermost)
            if node is not None:
                self.calls.append(node)
            caller_file, self.here = self.here, func.module.path
            try:
                return self.eval(func.node.body, frame, inner)
            finally:
                self.here = caller_file
                if node is not None:
                    self.calls.pop()
        self._active[id(func.node)] = self._active.get(id(func.node), 0) + 1
        if node is not None:
            self.calls.append(node)
        self._dropped |= dropped_calls(func.node)
        generator = _is_generator(func.node)
        if generator:
            self.yields.append([])
            self.yield_writes.append([])
        caller_file, self.here = self.here, func.module.path
        try:
            flow = self.exec_block(func.node.body, frame, inner)
        except RecursionError:
            return unknown_from(*args, why=f"`{func.qualname}` nests too deep to follow")
        finally:
            self.here = caller_file
            self._active[id(func.node)] -= 1
            if node is not None:
                self.calls.pop()
            yielded = self.yields.pop() if generator else []
            at_yields = self.yield_writes.pop() if generator else []
        ends = list(flow.returns)
        if flow.normal is not None:
            ends.append((flow.normal, None))
        if generator:  # run when called: the sequence it yields, and what it had written when it yielded (what a
            # loop's body or a `with` block sees); what it writes after (a `@contextmanager`'s restoring `finally`)
            # is done when a `with` leaves it
            generated = self._generated(func, yielded, state)
            if at_yields and self.semantics.join != "unknown":
                entered = merge(at_yields, self.kept)
                assert entered is not None
                if ends and isinstance(generated, Many):
                    left = merge([State({}, s.writes, s.path) for s, _ in ends], self.kept)
                    assert left is not None
                    after = {k: v for k, v in left.writes.items() if entered.writes.get(k, _NONE) is not v}
                    self.on_exit[id(generated)] = (generated, after)
                take_writes(state, entered)
            return generated
        if not ends:
            if flow.raises and self.raise_ends_path:
                known_raises = [s.raised for s in flow.raises if s.raised is not None]
                raise PathEnds(set().union(*known_raises) if len(known_raises) == len(flow.raises) else None)
            return unknown_from(*args, why=f"`{func.qualname}` never returns")
        if flow.raises and self.raise_ends_path and self._trying:
            # a raise of a lookup or a call the client answered, in the callee: the call may raise path by path
            self._pending += [(s.path, s.raised, node if s.at_point else None) for s in flow.raises]
        if force and self.track_returns and flow.normal is not None:  # the implicit `return None` at its end
            self.record("return", func.module, func.node, "", flow.normal.path, None)
        if self.semantics.join == "unknown":  # what its paths agree on; the caller's path is not narrowed
            take_writes(state, merge_agreed([State({}, s.writes, s.path) for s, _ in ends], self.work))
            return self.join([(value, frozenset()) for _, value in ends])
        end = merge([State({}, s.writes, s.path) for s, _ in ends], self.kept)
        take_writes(state, end)
        state.path = end.path
        hop = f"returned by `{func.qualname}`"
        result = ends[0][1] if len(ends) == 1 else join_values([(value, s.path - end.path) for s, value in ends])
        if is_unknown(result) or isinstance(result, tuple):  # its annotation may say the kind of what is unknown
            result = self.kind_from(result, self.promised(func.module, func.owner, func.node))
        return traced(result, hop, self.hooks.traced)

    def _generated(self, func: Function, yielded: list[tuple[Any, frozenset]], state: State) -> Any:
        if not yielded:
            return []
        hop = f"yielded by `{func.qualname}`"
        element = join_values([(value, path - state.path) for value, path in yielded])
        return Many(traced(element, hop, self.hooks.traced))

    def not_followed(self, func: Function, args: list[Any], kwargs: dict[str, Any], why: str) -> Any:
        """A call the evaluator does not inline: what its annotation promises, else an unknown derived from its
        arguments."""
        return self.kind_from(
            unknown_from(*args, *kwargs.values(), why=why), self.promised(func.module, func.owner, func.node)
        )

    def bind(
        self, func: Function, self_value: Any, args: list[Any], kwargs: dict[str, Any], depth: int
    ) -> dict[str, Any]:
        spec = func.node.args
        positional = [*spec.posonlyargs, *spec.args]
        values = list(args)
        if self_value is not None and not is_static(func.node):
            values.insert(0, self_value)
        out: dict[str, Any] = {}
        unknown_rest = STAR_UNKNOWN in values
        values = [v for v in values if v is not STAR_UNKNOWN]
        spread = kwargs.get(STAR_KWARGS, UNKNOWN)
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        for i, param in enumerate(positional):
            if i < len(values):
                out[param.arg] = values[i]
            elif param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif unknown_rest or STAR_KWARGS in kwargs:
                out[param.arg] = self._spread_value(spread) if STAR_KWARGS in kwargs else UNKNOWN
            elif defaults[i] is not None:
                out[param.arg] = self._default(defaults[i], func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.vararg is not None:
            out[spec.vararg.arg] = Many(UNKNOWN) if unknown_rest else tuple(values[len(positional) :])
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif STAR_KWARGS in kwargs:
                out[param.arg] = self._spread_value(spread)
            elif default is not None:
                out[param.arg] = self._default(default, func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.kwarg is not None:
            named = {p.arg for p in [*positional, *spec.kwonlyargs]}
            extra = {k: v for k, v in kwargs.items() if k not in named and k != STAR_KWARGS}
            out[spec.kwarg.arg] = unknown_from(spread) if STAR_KWARGS in kwargs else extra
        return out

    def instantiate(
        self, cls: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        """`Cls(...)`: an enum member by value, a dataclass from its fields, or an object its `__init__` fills."""
        if self.tree.is_enum(cls):
            if len(args) == 1 and not kwargs:
                return with_labels(self.enum_by_value(cls, args[0]), labels_of(args[0]))
            return UNKNOWN
        if not self.semantics.construct_objects:
            return UNKNOWN
        obj = Obj(cls)
        fields = self.dataclass_fields(cls)
        init = self.tree.method(cls, "__init__")
        if fields is not None and (init is None or init[1] in [k for k, _ in fields]):
            values = [v for v in args if v is not STAR_UNKNOWN]
            for index, (klass, name) in enumerate(fields):
                if index < len(values):
                    obj.fields[name] = values[index]
                elif name in kwargs:
                    obj.fields[name] = kwargs[name]
                elif STAR_KWARGS in kwargs:
                    obj.fields[name] = self.element_of(kwargs[STAR_KWARGS])
                else:
                    default = field_default_of(klass, name)
                    module = self.tree.module(klass.module)
                    obj.fields[name] = (
                        self.eval(default, Frame(module, klass, None, frame.depth), State({}, {}, frozenset()))
                        if default is not None and module is not None
                        else UNKNOWN
                    )
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg is not None:
                        obj.nodes[kw.arg] = kw
            post = self.tree.method(cls, "__post_init__")
            if post is not None:
                self._call_method(post, obj, [], {}, node, frame, state)
            return obj
        if init is None:  # no constructor we can read: what it is given is what it holds
            obj.fields.update({k: v for k, v in kwargs.items() if k != STAR_KWARGS})
            if isinstance(node, ast.Call):
                obj.nodes.update({kw.arg: kw for kw in node.keywords if kw.arg})
        if init is not None:
            self._call_method(init, obj, args, kwargs, node, frame, state)
            # what the constructor wrote is the new object's own: it stays with the object wherever it goes
            for key in [k for k in state.writes if k[0] == id(obj)]:
                obj.fields[key[1]] = state.writes.pop(key)
        return obj

    def _call_method(
        self,
        found: tuple[Any, Any],
        obj: Obj,
        args: list[Any],
        kwargs: dict[str, Any],
        node: ast.AST,
        frame: Frame,
        state: State,
    ) -> None:
        method, klass = found
        module = self.tree.module(klass.module)
        if module is not None:
            self._invoke(Function(module, method, klass), obj, args, kwargs, state, frame.depth + 1, node)


def field_default_of(cls: Any, name: str) -> ast.expr | None:
    from specguard.evaluation.objects import field_default

    value = cls.attributes.get(name)
    return field_default(value) if value is not None else None


def _text(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return dotted(target) or ast.unparse(target)[:60]  # type: ignore[arg-type]


def is_static(node: ast.AST) -> bool:
    return any((dotted(d) or "").endswith("staticmethod") for d in getattr(node, "decorator_list", []))


def _is_generator(node: ast.AST) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return cached_on(
        node, "generator", lambda n: any(isinstance(sub, (ast.Yield, ast.YieldFrom)) for sub in own_nodes(n))
    )


def _pure(expr: ast.expr) -> bool:
    """An expression whose evaluation changes nothing (no call, no binding): skipping it loses nothing else."""
    return not any(
        isinstance(node, (ast.Call, ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for node in walked(expr)
    )


def _callable(value: Any) -> bool:
    return isinstance(value, (Function, Bound, Partial, ClassRef, Method, PyMethod))


def _joined_calls(func: Any, call: Callable[[Any], Any]) -> Any:
    """One of a few callables: each called, what they return joined (None, which cannot be called, is a path
    that raises)."""
    return join_values([(call(option), frozenset()) for option in plain(func).options if _callable(option)])


_NONE = object()  # no write of that key


def _any_callable(value: Any) -> bool:
    """One of a few values, some of which can be called (the others, None, are paths that raise)."""
    inner = plain(value)
    return isinstance(inner, OneOf) and any(_callable(x) for x in inner.options)


def _first(args: list[Any]) -> Any:
    return args[0] if args else None

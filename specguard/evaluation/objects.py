"""What the evaluator knows of objects: attributes (fields, properties, methods, class defaults), names of a
module, enums, dataclasses, comparisons and truth in three-valued logic."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specguard.evaluation import environment
from specguard.evaluation.annotations import annotated
from specguard.evaluation.budget import size
from specguard.evaluation.instances import writers
from specguard.evaluation.paths import Cond, Frame, Outcome, PathEnds, Site, State, join_values
from specguard.evaluation.values import (
    NO_LABELS,
    NOT_HANDLED,
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
    Token,
    TokenAttr,
    TypeOf,
    is_unknown,
    known,
    labels_of,
    place_text,
    plain,
    same_value,
    settled,
    unknown_from,
    with_labels,
)
from specguard.program.ast_tools import cached_on, dotted
from specguard.program.tree import ClassInfo, ParsedModule, SourceTree, base_name, rebound_globals, starts_as_none

if TYPE_CHECKING:
    from specguard.evaluation.hooks import Hooks
    from specguard.evaluation.semantics import Semantics

STR_METHODS = {"lower", "upper", "strip", "lstrip", "rstrip", "replace", "startswith", "endswith", "split", "join"}
STR_METHODS |= {"removeprefix", "removesuffix", "format", "partition", "rpartition", "count", "find", "isdigit"}
# `{:>1000000000}` or `{0.__class__}`: format fields that do more than insert a value
FORMAT_FIELD_SPEC = re.compile(r"\{[^{}]*[:!.\[][^{}]*\}")
DICT_METHODS = {"get", "items", "keys", "values", "pop", "copy", "setdefault", "update"}
LIST_METHODS = {"append", "remove", "extend", "copy", "index", "count", "pop", "insert"}
SET_METHODS = {"add", "discard", "copy", "union", "pop"}
CONTAINERS = (list, tuple, set, frozenset, dict)
_REFERENCES = (ClassRef, Function, Bound, Partial, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod, FieldInfo)

BUILTINS = {
    "getattr",
    "hasattr",
    "setattr",
    "isinstance",
    "callable",
    "len",
    "any",
    "all",
    "min",
    "max",
    "sum",
    "sorted",
    "reversed",
    "list",
    "tuple",
    "set",
    "frozenset",
    "dict",
    "int",
    "str",
    "float",
    "bool",
    "abs",
    "repr",
    "type",
    "super",
    "range",
    "enumerate",
    "zip",
    "next",
    "iter",
    "vars",
    "object",
    "print",
    "round",
    "map",
    "filter",
}

ORDERINGS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

MISSING: Any = object()
_DECLARED: Any = object()  # a field the class declares, whose value on this instance the evaluation does not know


# Attributes every module has, set by the import system.
_MODULE_DUNDERS = frozenset({"__name__", "__package__", "__file__", "__doc__", "__spec__", "__loader__", "__path__"})


class ObjectModel:
    """Attributes, names, enums, comparisons and truth, the conditions and outcomes an evaluation records;
    `Evaluator` adds statements, expressions and calls."""

    tree: SourceTree
    hooks: Hooks
    semantics: Semantics
    outcomes: list[Outcome]
    _conds: dict[tuple[int, str], Cond]
    _module_values: dict[tuple[str, str], Any]
    _promised: dict[tuple[int, str], Any]
    _factory_fields: dict[tuple[tuple[str, str], str], Any]
    _resolving: set[tuple[str, str]]
    env: environment.ServedEnvironment
    _module_reads: dict[tuple[str, str], list[str]]  # the serving environment's variables each value read
    quiet: int

    def eval(self, expr: ast.expr | None, frame: Frame, state: State) -> Any:
        raise NotImplementedError

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
        raise NotImplementedError

    home: Any = None  # the file of the function being run: places in other files are named with their file
    here: Any = None  # the file of the function being evaluated now (the run's own, or a followed call's)

    def place(self, frame: Frame, node: ast.AST) -> str:
        """Where a node is, as a verdict's trail names it: its line, and its file when that is not the run's own."""
        home = str(self.home) if self.home is not None else None
        return place_text(str(frame.module.path), getattr(node, "lineno", 0), home)

    def cond(self, node: ast.AST, module: ParsedModule, kind: str = "test") -> Cond:
        found = self._conds.get((id(node), kind))
        if found is None:
            found = Cond(node, module.path, self.tree.relpath(module.path), kind)
            self._conds[(id(node), kind)] = found
        return found

    def _delete(self, target: ast.expr, frame: Frame, state: State) -> None:
        if isinstance(target, ast.Subscript):
            base = plain(self.eval(target.value, frame, state))
            key = plain(self.eval(target.slice, frame, state))
            if isinstance(base, dict) and known(key):
                base.pop(key, None)
        elif isinstance(target, ast.Name):
            state.locals[target.id] = UNKNOWN

    def _default(self, expr: ast.expr, func: Function, depth: int) -> Any:
        return self.eval(expr, Frame(func.module, func.owner, func.closure, depth), State({}, {}, frozenset()))

    def record(
        self, kind: str, module: ParsedModule, node: ast.AST | None, message: str, path: frozenset, detail: Any = None
    ) -> None:
        self.outcomes.append(Outcome(Site(kind, module, node, message), path, detail))  # type: ignore[arg-type]

    def charge(self, units: int) -> None:
        """Work done on data (elements walked), for a client whose budget counts it (the config pre-flight's)."""

    # ---- attributes ---------------------------------------------------------------------------------------

    def getattr(
        self, base: Any, attr: str, state: State, depth: int, missing: Any = UNKNOWN, node: ast.AST | None = None
    ) -> Any:
        self._reading = node  # a property this read runs is a call written as this attribute
        value = self._getattr(base, attr, state, depth, missing)
        if value is MISSING:
            return value
        answered = self.hooks.attribute(self, base, attr, value, node, state)  # type: ignore[arg-type]
        return value if answered is NOT_HANDLED else answered

    def _getattr(self, base: Any, attr: str, state: State, depth: int, missing: Any) -> Any:
        if isinstance(base, OneOf):
            options = base.options
            if not _dunder(attr) and any(x is not None for x in options):
                options = tuple(x for x in options if x is not None)  # None has no such attribute: that path raises
            values = [self._getattr(with_labels(x, base.labels), attr, state, depth, UNKNOWN) for x in options]
            return join_values([(v, frozenset()) for v in values])
        if isinstance(base, Tagged):
            inner = self._getattr(base.value, attr, state, depth, missing)
            return inner if inner is missing else with_labels(inner, self.provenance(base))
        if isinstance(base, Obj):
            if attr == "__dict__":
                return self.instance_dict(base, state)
            if attr == "__class__":
                return self.type_of(base)
            key = (id(base), attr)
            if key in state.writes:
                return settled(state.writes[key])
            if attr in base.fields:
                return self._held_field(base, attr) if base.held else base.fields[attr]
            found: Any = MISSING
            if base.cls is not None:
                found = self._class_member(
                    base.cls, attr, base, state, depth, instance=True, missing=MISSING, defaults=base.defaults
                )
                if found is not MISSING and found is not _DECLARED:
                    return self._shadowed(base, attr, found, state, depth)
            answered = self.hooks.instance_attribute(self, base, attr)  # type: ignore[arg-type]
            if answered is not NOT_HANDLED and (answered is not UNKNOWN or not base.label):
                return answered
            if found is _DECLARED and not base.fields and self_built(base.cls):  # type: ignore[arg-type]
                built = self._factory_field(base.cls, attr, depth)  # type: ignore[arg-type]
                if built is not MISSING:
                    return built
            declared = self._declared_object(base, attr, state) if found is _DECLARED else None
            if declared is not None:
                return declared
            if base.label:  # an object the client named: what is read from it has an identity
                return Sym(f"{base.label}.{attr}", self.provenance(base))
            if base.cls is None or base.labels or found is _DECLARED:
                return with_labels(UNKNOWN, self.provenance(base))
            return missing if missing is not UNKNOWN else UNKNOWN
        if isinstance(base, Sym):
            key = (base.name, attr)
            if key in state.writes:
                return state.writes[key]
            return Sym(f"{base.name}.{attr}", self.provenance(base))
        if isinstance(base, Abstract) and base.length is not None and attr == "shape":
            return (base.length,)  # a view `buf[:n]`: its first dimension is n
        if isinstance(base, Abstract) and base.kind is not None:
            return self._typed_member(base, attr, missing)
        if isinstance(base, (Abstract, Many)) or base is UNKNOWN:
            return with_labels(UNKNOWN, self.provenance(base))
        if isinstance(base, ClassRef):
            if self.tree.is_enum(base.info) and attr in self.tree.enum_members(base.info):
                return EnumMember(base.info, attr)
            return self._class_member(
                base.info, attr, base, state, depth, instance=False, missing=missing, defaults=True
            )
        if isinstance(base, EnumMember):
            if attr == "name":
                return base.name
            if attr == "value":
                return self.enum_value(base)
            found = self._class_member(
                base.cls, attr, base, state, depth, instance=True, missing=missing, defaults=False
            )
            return UNKNOWN if found is _DECLARED else found
        if isinstance(base, SuperRef):
            return self._super_attribute(base, attr, state, depth)
        if isinstance(base, ModuleRef):
            return self._resolved(base.name, attr)
        if isinstance(base, Token):
            return TokenAttr(base, attr)
        if isinstance(base, Opaque):
            return self._opaque(f"{base.name}.{attr}")
        if isinstance(base, FieldInfo):
            return base.name if attr == "name" else base.compare if attr == "compare" else UNKNOWN
        if isinstance(base, str) and attr in STR_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, dict) and attr in DICT_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, list) and attr in LIST_METHODS:
            return PyMethod(base, attr)
        if isinstance(base, set) and attr in SET_METHODS:
            return PyMethod(base, attr)
        return missing if missing is not UNKNOWN and base is None else UNKNOWN

    def _declared_object(self, base: Obj, attr: str, state: State) -> Obj | None:
        """A field the class declares (`_staged: Optional[ForwardBatch] = None`) that a method fills, read before
        anything here wrote it: the object a client makes of its annotation (a batch), the same one at every read
        until a write; None where the annotation promises no such object."""
        assert base.cls is not None
        owner = next((k for k in self.tree.ancestors(base.cls) if attr in k.annotations), None)
        if owner is None:
            return None
        value = plain(self.reading(owner.annotations[attr], self.tree.module(owner.module), owner))
        kind = self._instance_kind(value)
        if kind is not None and attr not in owner.attributes and self.plain_class(owner):
            # `decode_backend: TRTLLMMLABackend` in a plain class's body (a declaration, not a record's field),
            # narrowing what a base's constructor was handed: an instance of that class, whose methods run where
            # this one calls them
            value = Obj(kind, label=f"{base.label}.{attr}" if base.label else "")
        if not isinstance(value, Obj):
            return None
        state.writes[(id(base), attr)] = value
        return value

    def _instance_kind(self, value: Any) -> ClassInfo | None:
        """The plain class an annotation's reading says a value is an instance of."""
        inner = plain(value)
        kind = inner.kind if isinstance(inner, Abstract) else None
        return kind if kind is not None and self.plain_class(kind) else None

    def plain_class(self, cls: ClassInfo) -> bool:
        """A class whose instance is what its constructor made of it: no enum or record in its lineage."""
        return not self.tree.is_enum(cls) and not self._record(cls)

    def _shadowed(self, base: Obj, attr: str, found: Any, state: State, depth: int) -> Any:
        """A class-level value read through the instance the evaluation runs on: the class's value (the default
        until a method runs) joined with what methods assign to the instance's own attribute of that name
        (`_fn = None` on the class, a partial set in `set_attn`), which shadows it once they run. A method of
        the class is what it is."""
        if base.label != "self" or base.cls is None or not writers(base.cls, self.tree, attr):
            return found
        owner = next((k for k in self.tree.ancestors(base.cls) if attr in k.methods or attr in k.attributes), None)
        if owner is not None and attr in owner.methods:
            return found
        written = self.hooks.instance_attribute(self, base, attr)  # type: ignore[arg-type]
        if written is NOT_HANDLED:
            return found
        default = self._class_member(base.cls, attr, base, state, depth, instance=True, missing=MISSING, defaults=True)
        return _or_written(found if default is MISSING or default is _DECLARED else default, written)

    def _held_field(self, base: Obj, attr: str) -> Any:
        """A field of an object an instance attribute holds: its value joined with what the methods of its class
        write into it (as the client reads an instance's attribute), where some method does."""
        value = base.fields[attr]
        if base.cls is None or not writers(base.cls, self.tree, attr):
            return value
        written = self.hooks.instance_attribute(self, Obj(base.cls, label="self"), attr)  # type: ignore[arg-type]
        return value if written is NOT_HANDLED else _or_written(value, written)

    # ---- instances known only by their class (an annotation) -------------------------------------------------

    def annotated_value(self, annotation: ast.expr, frame: Frame) -> Any:
        """What an annotation written in `frame`'s module promises (NOT_HANDLED: nothing the evaluation can use):
        the client's reading of a name first, then an instance of a class the tree defines."""
        return annotated(annotation, lambda leaf: self._annotated_name(leaf, frame))

    def _annotated_name(self, leaf: ast.expr, frame: Frame) -> Any:
        answered = self.hooks.annotation(self, leaf, frame)  # type: ignore[arg-type]
        if answered is not NOT_HANDLED:
            return answered
        text = dotted(leaf)
        found = self.tree.resolve(frame.module.name, text) if text is not None else None
        if not isinstance(found, ClassInfo) or self.tree.is_enum(found):
            return NOT_HANDLED
        return Abstract(kind=found)

    def reading(self, annotation: ast.expr, module: ParsedModule | None, owner: ClassInfo | None) -> Any:
        """What an annotation written in `module` (in the body of `owner`) promises; UNKNOWN if nothing the
        evaluation can use."""
        if module is None:
            return UNKNOWN
        value = self.annotated_value(annotation, Frame(module, owner, None, 0))
        return UNKNOWN if value is NOT_HANDLED else value

    def promised(self, module: ParsedModule | None, owner: ClassInfo | None, node: ast.AST) -> Any:
        """What a function of `module` (a method of `owner`) promises to return, by its annotation."""
        returns = getattr(node, "returns", None)
        if returns is None or module is None:
            return UNKNOWN
        key = (id(returns), module.name)
        if key in self._promised:  # an annotation says the same wherever the function is called
            return self._promised[key]
        value = self.reading(returns, module, owner)
        if _shareable(value):  # an object a client made of it (a descriptor) is one per call
            self._promised[key] = value
        return value

    def kind_from(self, value: Any, promise: Any) -> Any:
        """`value`, an unknown, with the kind of instance `promise` (an annotation's reading) says it is: items of a
        tuple and elements of a collection too. Labels and reasons stay the value's own."""
        inner = plain(value)
        if promise is UNKNOWN or not is_unknown(inner) and not isinstance(inner, tuple):
            return value
        if inner is UNKNOWN:
            return promise
        if isinstance(inner, Sym):  # an attribute known by its name only: what the annotation says it is
            return with_labels(promise, inner.labels)
        if isinstance(inner, Abstract) and inner.kind is None and isinstance(promise, Abstract):
            return replace(inner, kind=promise.kind)
        if isinstance(inner, Many) and isinstance(promise, Many):
            return Many(self.kind_from(inner.element, promise.element), inner.labels)
        if isinstance(inner, tuple) and isinstance(promise, tuple) and len(inner) == len(promise):
            return tuple(self.kind_from(item, kind) for item, kind in zip(inner, promise, strict=True))
        return value

    def typed_method(
        self, receiver: Abstract, name: str
    ) -> tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The method `name` of the class a typed unknown is an instance of, and the class defining it."""
        assert receiver.kind is not None
        for klass in self.tree.ancestors(receiver.kind):
            if name in klass.methods:
                return klass, klass.methods[name]
        return None

    def _typed_member(self, base: Abstract, attr: str, missing: Any = UNKNOWN) -> Any:
        """An attribute of an instance known only by its class: a method stays a method of it (known by name,
        not followed); a property or a declared field is what its annotation promises; one that no class of a
        lineage the tree holds whole declares or assigns is `missing` (`getattr(meta, "local_lens", default)`)."""
        assert base.kind is not None
        inherited = self.provenance(base)
        if self_built(base.kind):
            # a frozen record whose class builds its instances itself: one of those (its fields what they were
            # given, its properties run on them)
            built = self._getattr(Obj(base.kind), attr, State({}, {}, frozenset()), 0, missing)
            return built if built is missing else with_labels(built, inherited)
        for klass in self.tree.ancestors(base.kind):
            if attr in klass.methods:
                node = klass.methods[attr]
                names = {(dotted(d) or "").rpartition(".")[2] for d in node.decorator_list}
                if names & {"property", "cached_property"}:
                    return with_labels(self.promised(self.tree.module(klass.module), klass, node), inherited)
                return Method(base, attr)
            if attr in klass.annotations and not is_classvar(klass.annotations[attr]):
                value = self.reading(klass.annotations[attr], self.tree.module(klass.module), klass)
                return with_labels(value, inherited)
        if missing is not UNKNOWN and self._never_has(base.kind, attr):
            return missing
        return with_labels(UNKNOWN, inherited)

    def _never_has(self, cls: ClassInfo, attr: str) -> bool:
        """Whether no instance of `cls` has `attr`: every base of its lineage is in the tree (or `object`), and none
        declares it, holds it at class level or assigns it to `self`."""
        lineage = self.tree.ancestors(cls)
        bases = [(klass, base_name(base)) for klass in lineage for base in klass.bases]
        if any(name != "object" and self.tree.resolve_class(klass.module, name or "") is None for klass, name in bases):
            return False
        if any(attr in klass.attributes or attr in klass.annotations for klass in lineage):
            return False
        return not writers(cls, self.tree, attr) and "__getattr__" not in {m for k in lineage for m in k.methods}

    def provenance(self, value: Any) -> frozenset[Label]:
        """The labels of a value that what is read from it inherits: those that say where it came from."""
        labels = labels_of(value) if isinstance(value, (Abstract, Tagged, Sym, Many, Obj)) else NO_LABELS
        return frozenset(label for label in labels if label.kind not in self.hooks.value_kinds)

    def _super_attribute(self, base: SuperRef, attr: str, state: State, depth: int) -> Any:
        owner = base.self_value.value if isinstance(base.self_value, Tagged) else base.self_value
        cls = owner.cls if isinstance(owner, (Obj, EnumMember)) else owner.info if isinstance(owner, ClassRef) else None
        if cls is None:
            return UNKNOWN
        chain = self.tree.ancestors(cls)
        start = next((j for j, k in enumerate(chain) if k == base.owner), len(chain))
        for klass in chain[start + 1 :]:
            if attr in klass.methods:
                return self._method_value(klass, klass.methods[attr], base.self_value, state, depth)
        return UNKNOWN

    def _class_member(
        self,
        cls: ClassInfo,
        attr: str,
        owner_value: Any,
        state: State,
        depth: int,
        *,
        instance: bool,
        missing: Any,
        defaults: bool,
    ) -> Any:
        for klass in self.tree.ancestors(cls):
            if attr in klass.methods:
                return self._method_value(klass, klass.methods[attr], owner_value, state, depth)
            if attr in klass.attributes:
                module = self.tree.module(klass.module)
                if module is None:
                    return UNKNOWN
                if not defaults and not is_classvar(klass.annotations.get(attr)) and self._own_attribute(cls, attr):
                    return _DECLARED if instance and attr in klass.annotations else UNKNOWN
                value = field_default(klass.attributes[attr])
                if value is None:
                    return UNKNOWN
                return self.eval(value, Frame(module, klass, None, depth), State({}, {}, frozenset()))
            if attr in klass.annotations:  # a declared field without a class-level value
                return _DECLARED if instance else UNKNOWN
        return missing

    def _factory_field(self, cls: ClassInfo, attr: str, depth: int) -> Any:
        """A field of a record known only by its class (a parameter, another record's field), where the class builds
        its instances itself: what its factories (class methods returning `cls(...)`: `from_server_args`) give the
        field, run on what they are handed (unknown), joined. A frozen settings object is what its factory read;
        MISSING where the class has no factory, one of them builds no such object, or the field is being built."""
        key = (cls.key, attr)
        if key in self._factory_fields:
            return self._factory_fields[key]
        self._factory_fields[key] = MISSING  # a factory that reads the field of another such instance reads nothing
        module = self.tree.module(cls.module)
        factories = [node for node in cls.methods.values() if _builds_own_class(node)]
        values: list[Any] = []
        for node in factories if module is not None else []:
            state = State({}, {}, frozenset())
            try:
                built = self._invoke(Function(module, node, cls), ClassRef(cls), [], {}, state, depth + 1)  # type: ignore[arg-type]
            except PathEnds:
                continue
            inner = plain(built)
            options = inner.options if isinstance(inner, OneOf) else (inner,)
            if not all(isinstance(o, Obj) and o.cls == cls for o in options):
                values = []
                break
            values += [written_fields(o, state).get(attr, o.fields.get(attr, MISSING)) for o in options]  # type: ignore[union-attr]
        if values and MISSING not in values:
            self._factory_fields[key] = join_values([(v, frozenset()) for v in values])
        return self._factory_fields[key]

    def _own_attribute(self, cls: ClassInfo, attr: str) -> bool:
        """Whether an instance of `cls` may hold its own `attr` beside the class-level value: one its constructor
        fills (a dataclass, a pydantic model, a named tuple) or a method assigns. Otherwise the class-level value
        is what every instance reads (a subclass's flag that only overrides the base's)."""
        return self._record(cls) or bool(writers(cls, self.tree, attr))

    def _record(self, cls: ClassInfo) -> bool:
        """Whether the class's instances are built field by field, each annotated name a field."""
        return any(declares_record(klass) for klass in self.tree.ancestors(cls))

    def _method_value(
        self, klass: ClassInfo, node: ast.FunctionDef | ast.AsyncFunctionDef, owner_value: Any, state: State, depth: int
    ) -> Any:
        module = self.tree.module(klass.module)
        if module is None:
            return UNKNOWN
        func = Function(module, node, klass)
        names = {(dotted(d) or "").rpartition(".")[2] for d in node.decorator_list}
        if names & {"property", "cached_property"}:
            if isinstance(owner_value, ClassRef):
                return UNKNOWN
            return self._invoke(func, owner_value, [], {}, state, depth + 1, self._reading)
        if "staticmethod" in names:
            return func
        if names & {"classmethod", "field_validator", "model_validator"}:
            inner = plain(owner_value)
            owner = (
                inner
                if isinstance(inner, ClassRef)
                else ClassRef(inner.cls)
                if isinstance(inner, (Obj, EnumMember)) and inner.cls
                else ClassRef(klass)
            )
            return Bound(func, owner)
        if isinstance(owner_value, ClassRef):
            return func  # an unbound method reached through the class
        return Bound(self._decorated(func, module, klass, state, depth), owner_value)

    def _decorated(self, func: Function, module: ParsedModule, klass: ClassInfo, state: State, depth: int) -> Function:
        """A method as its decorators leave it, where each is a function of the tree written by name
        (`@rank_local_lens`, whose `wrapped(self, *args, seq_lens, **kwargs)` calls the method it was handed): what
        calling the decorator with the method returns. A decorator written as a call, or one the evaluation cannot
        read (`@torch.no_grad()`, `@functools.lru_cache`), leaves the method as written."""
        decorators = [d for d in func.node.decorator_list if isinstance(d, (ast.Name, ast.Attribute))]
        value: Function = func
        for decorator in reversed(decorators):
            maker = plain(self.eval(decorator, Frame(module, None, None, depth), state))
            if not isinstance(maker, Function) or maker.owner is not None:
                return func
            made = plain(self._invoke(maker, None, [value], {}, state.copy(), depth + 1, decorator))
            if not isinstance(made, Function):
                return func
            value = made
        return value

    # ---- names ----------------------------------------------------------------------------------------------

    def module_value(self, module: ParsedModule, name: str) -> Any:
        shadowed = name in module.assigns or name in module.functions or name in module.imports
        if name in BUILTINS and not shadowed and name not in module.classes:
            return Opaque(f"builtins.{name}")
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return self._resolved(module.name, name)

    def _resolved(self, module: str, name: str) -> Any:
        """A module-level name's value, computed once per evaluator; the serving environment's variables it read
        are read again at each use (a test of `envs.X` is decided by X however often it is made)."""
        key = (module, name)
        if key in self._module_values:
            if key in self._module_reads:
                self.env.log.extend(self._module_reads[key])
            return self._module_values[key]
        if key in self._resolving:
            return UNKNOWN
        self._resolving.add(key)
        mark = len(self.env.log)
        self.quiet += 1
        try:
            value = self._resolve_uncached(module, name)
        finally:
            self.quiet -= 1
            self._resolving.discard(key)
        self._module_values[key] = value
        if len(self.env.log) > mark:
            self._module_reads[key] = self.env.log[mark:]
        return value

    def _opaque(self, name: str) -> Any:
        """A name outside the program; `os.environ` is the serving environment's where the code runs in one."""
        if name == "os.environ" and self.semantics.served_environment:
            return self.env.environ()
        return Opaque(name)

    def _resolve_uncached(self, module: str, name: str) -> Any:
        parsed = self.tree.module(module)
        if name in _MODULE_DUNDERS and parsed is not None and name not in parsed.assigns:
            # Every module has them, whatever its __getattr__ says (`logging.getLogger(__name__)`).
            package = module if parsed.is_package else module.rpartition(".")[0]
            return {"__name__": module, "__package__": package}.get(name, UNKNOWN)
        if (
            self.semantics.served_environment
            and parsed is not None
            and "__getattr__" in parsed.functions
            and (name in parsed.typing_only or (name not in parsed.imports and self.tree.resolve(module, name) is None))
            and self.tree.file_of(f"{module}.{name}") is None
        ):
            # Declared for type checkers only, or not at all: at run time the module's __getattr__ answers (PEP 562,
            # vLLM's envs); a submodule of that name is imported instead (`from vllm import envs`).
            hook = Function(parsed, parsed.functions["__getattr__"])
            return self._invoke(hook, None, [name], {}, State({}, {}, frozenset()), 0)
        found = self.tree.resolve(module, name)
        package = self.tree.package
        if isinstance(found, ClassInfo):
            return ClassRef(found)
        if isinstance(found, str):  # a module: one the program reads, or one outside it (the standard library)
            inside = found.startswith(package) and self.tree.file_of(found) is not None
            return ModuleRef(found) if inside else Opaque(found)
        if isinstance(found, tuple):
            parsed, node = found
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return Function(parsed, node)
            if any(parsed.assigns.get(varying) is node for varying in parsed.varies):
                return UNKNOWN  # assigned again where a check at import time fails: which value is not known
            if parsed.assigns.get(name) is node and starts_as_none(parsed, name) and name in rebound_globals(parsed):
                # None until a function sets it (`_current = None`, then `global _current` in
                # `set_forward_context`): what a function reads there is what the last setter left, not known
                return UNKNOWN
            frame = Frame(parsed, None, None, 0)
            return self.eval(node, frame, State({}, {}, frozenset()))
        parsed = self.tree.module(module)
        if parsed is not None and name in parsed.imports:  # imported, and not found where it comes from
            src, orig = parsed.imports[name]
            return self._opaque(f"{src}.{orig}")
        if parsed is not None and name in parsed.module_imports:
            target = parsed.module_imports[name]
            return ModuleRef(target) if target.startswith(package) and self.tree.module(target) else Opaque(target)
        if self.tree.file_of(f"{module}.{name}") is not None:
            return ModuleRef(f"{module}.{name}")
        return UNKNOWN

    # ---- enums and dataclasses -----------------------------------------------------------------------------

    def enum_value(self, member: EnumMember) -> Any:
        expr = member.cls.attributes.get(member.name)
        if expr is None:
            return UNKNOWN
        module = self.tree.module(member.cls.module)
        if module is None:
            return UNKNOWN
        # Members may name earlier members (`FULL_DECODE_ONLY = (FULL, NONE)`): they mean their values there.
        siblings = {n: UNKNOWN for n in self.tree.enum_members(member.cls)}
        state = State({}, {}, frozenset())
        for name in self.tree.enum_members(member.cls):
            if name == member.name:
                break
            siblings[name] = self.eval(member.cls.attributes[name], Frame(module, member.cls, siblings, 0), state)
        return self.eval(expr, Frame(module, member.cls, siblings, 0), state)

    def enum_by_value(self, cls: ClassInfo, value: Any) -> Any:
        value = plain(value)
        if isinstance(value, EnumMember) and value.cls == cls:
            return value
        if not known(value):
            return UNKNOWN
        for name in self.tree.enum_members(cls):
            if same_value(self.enum_value(EnumMember(cls, name)), value):
                return EnumMember(cls, name)
        return UNKNOWN

    @staticmethod
    def type_of(obj: Obj) -> Any:
        return ClassRef(obj.cls) if obj.cls is not None else TypeOf(obj)

    def instance_dict(self, obj: Obj, state: State) -> Any:
        """`vars(obj)` / `obj.__dict__`: of a dataclass instance, each field, the value it was built with or written
        on this path, else its default; of an object whose class the evaluation does not read, the fields it holds
        (unknown where the class is read and is not a dataclass)."""
        written = written_fields(obj, state)
        if obj.cls is None:
            return {**obj.fields, **written}
        fields = self.dataclass_fields(obj.cls)
        if not fields:
            return UNKNOWN
        out: dict[str, Any] = {}
        for _, name in fields:
            if name in written:
                out[name] = written[name]
            elif name in obj.fields:
                out[name] = obj.fields[name]
            else:
                out[name] = self._getattr(obj, name, state, 0, UNKNOWN)
        return out

    def named_tuple(self, cls: ClassInfo) -> bool:
        """A `NamedTuple` class (its instances unpack, iterate and index as a tuple of their fields)."""
        return any(_declares_named_tuple(klass) for klass in self.tree.ancestors(cls))

    def dataclass_fields(self, cls: ClassInfo) -> list[tuple[ClassInfo, str]] | None:
        """The fields of a dataclass in definition order (bases first), or None if it is not one we can read."""
        chain = self.tree.ancestors(cls)
        if not any(_positional_record(k) for k in chain):
            return None
        seen: dict[str, ClassInfo] = {}
        for klass in reversed(chain):
            if not _positional_record(klass):
                continue
            for name, annotation in klass.annotations.items():
                if not is_classvar(annotation):
                    seen.pop(name, None)
                    seen[name] = klass
        return [(klass, name) for name, klass in seen.items()]

    def field_infos(self, cls: ClassInfo) -> tuple[FieldInfo, ...] | None:
        fields = self.dataclass_fields(cls)
        if fields is None:
            return None
        return tuple(FieldInfo(name, _compares(klass.attributes.get(name))) for klass, name in fields)

    # ---- comparisons and truth -------------------------------------------------------------------------------

    def compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        for side, other, flip in ((left, right, False), (right, left, True)):
            if isinstance(side, OneOf):
                results = [
                    self.compare(op, other, with_labels(x, side.labels))
                    if flip
                    else self.compare(op, with_labels(x, side.labels), other)
                    for x in side.options
                ]
                return join_values([(r, frozenset()) for r in results])
        labels = self._compared_labels(left, right)
        result = self._compare(op, plain(left), plain(right))
        if result is UNKNOWN:
            return (
                unknown_from(left, right, keep=frozenset(k.kind for k in labels))
                if labels
                else self._unknown(left, right)
            )
        return with_labels(result, labels)

    def _unknown(self, *values: Any) -> Any:
        return unknown_from(*values)

    def _compared_labels(self, left: Any, right: Any) -> frozenset[Label]:
        found = (
            labels_of(left) | labels_of(right)
            if isinstance(left, (Tagged, Abstract, Sym)) or isinstance(right, (Tagged, Abstract, Sym))
            else NO_LABELS
        )
        return frozenset(label for label in found if label.kind not in self.hooks.value_kinds)

    def _compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            same = self._identical(left, right)
            if same is UNKNOWN:
                return UNKNOWN
            return same if isinstance(op, ast.Is) else not same
        if isinstance(op, (ast.Eq, ast.NotEq)):
            equal = self.equal(left, right)
            if equal is UNKNOWN:
                return UNKNOWN
            return equal if isinstance(op, ast.Eq) else not equal
        if isinstance(op, (ast.In, ast.NotIn)):
            inside = self._contains(right, left)
            if inside is UNKNOWN:
                return UNKNOWN
            return inside if isinstance(op, ast.In) else not inside
        fn = ORDERINGS.get(type(op))
        if fn is None or not all(isinstance(v, (int, float)) for v in (left, right)):
            return UNKNOWN  # (numbers only: never a walk of two containers)
        return fn(left, right)

    def _identical(self, a: Any, b: Any) -> Any:
        if isinstance(a, Sym) and isinstance(b, Sym) and a.name == b.name:
            return True
        if a is None and isinstance(b, Abstract) and b.exists or b is None and isinstance(a, Abstract) and a.exists:
            return False
        if is_unknown(a) or is_unknown(b):
            return UNKNOWN
        if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
            return a is b
        if isinstance(a, EnumMember) and isinstance(b, EnumMember):
            return a == b
        if isinstance(a, Obj) or isinstance(b, Obj):
            return a is b
        if isinstance(a, ClassRef) and isinstance(b, ClassRef):
            return a.info == b.info
        return UNKNOWN

    def equal(self, a: Any, b: Any) -> Any:
        a, b = plain(a), plain(b)
        if isinstance(a, Sym) and isinstance(b, Sym) and a.name == b.name:
            return True
        if isinstance(a, Obj) and isinstance(b, Obj):
            return self._objects_equal(a, b)
        if isinstance(a, CONTAINERS) or isinstance(b, CONTAINERS):
            self.charge(size(a) + size(b))  # walked to see that they are known, then compared
        if not known(a) or not known(b):
            return UNKNOWN
        if isinstance(a, EnumMember) or isinstance(b, EnumMember):
            if isinstance(a, EnumMember) and isinstance(b, EnumMember):
                return a == b
            member, other = (a, b) if isinstance(a, EnumMember) else (b, a)
            if self.tree.base_names(member.cls) & {"str", "int", "StrEnum", "IntEnum"}:
                return self.equal(self.enum_value(member), other)
            return False
        if isinstance(a, Obj) or isinstance(b, Obj):
            obj = a if isinstance(a, Obj) else b
            if obj.cls is not None and self.tree.method(obj.cls, "__eq__") is not None:
                return UNKNOWN
            return False
        if isinstance(a, _REFERENCES):
            return a == b
        if isinstance(b, _REFERENCES):
            return False
        try:
            return bool(a == b)
        except Exception:  # noqa: BLE001 - values whose comparison fails: not decided
            return UNKNOWN

    def _objects_equal(self, a: Obj, b: Obj) -> Any:
        """Two objects: the same one, or instances of one dataclass compared field by field (its `__eq__`)."""
        if a is b:
            return True
        if a.cls is None or b.cls is None or a.cls != b.cls:
            return UNKNOWN if a.cls is None or b.cls is None else False
        if self.tree.method(a.cls, "__eq__") is not None:
            return UNKNOWN
        infos = self.field_infos(a.cls)
        if infos is None:
            return False  # object identity
        undecided = False
        for info in infos:
            if not info.compare:
                continue
            left, right = a.fields.get(info.name, UNKNOWN), b.fields.get(info.name, UNKNOWN)
            same = self.equal(left, right)
            if same is False:
                return False
            if same is UNKNOWN:
                undecided = True
        return UNKNOWN if undecided else True

    def _contains(self, container: Any, item: Any) -> Any:
        container = plain(container)
        if isinstance(container, str) and isinstance(item, str):
            return item in container
        if isinstance(container, LiteralType):
            container = list(container.values)
        if isinstance(container, environment.ServedEnviron):
            return item in container if isinstance(item, str) else UNKNOWN  # a read of that variable
        if isinstance(container, dict):
            container = list(container.keys())
        if not isinstance(container, (list, tuple, set, frozenset)):
            return UNKNOWN
        self.charge(len(container))
        undecided = False
        for element in container:
            eq = self.equal(element, item)
            if eq is True:
                return True
            if eq is UNKNOWN:
                undecided = True
        return UNKNOWN if undecided else False

    def truth(self, value: Any, frame: Frame, state: State) -> Any:
        if isinstance(value, OneOf):
            truths = {self.truth(x, frame, state) for x in value.options}
            return truths.pop() if len(truths) == 1 else UNKNOWN
        value = plain(value)
        if is_unknown(value):
            return UNKNOWN
        if isinstance(value, (Obj, EnumMember)):
            cls = value.cls
            if cls is None:
                return True
            found = self.tree.method(cls, "__bool__") or self.tree.method(cls, "__len__")
            if found is None:
                return True
            module = self.tree.module(found[1].module)
            if module is None or found[0].name != "__bool__":
                return UNKNOWN
            result = self._invoke(Function(module, found[0], found[1]), value, [], {}, state, frame.depth + 1)
            result = plain(result)
            return UNKNOWN if result is UNKNOWN else bool(result) if known(result) else UNKNOWN
        if isinstance(value, _REFERENCES):
            return True
        if isinstance(value, CONTAINERS):
            return len(value) > 0
        try:
            return bool(value)
        except Exception:  # noqa: BLE001 - an evaluated value without a truth value: undecided
            return UNKNOWN

    def isinstance_of(self, value: Any, types: Any) -> Any:
        value, types = plain(value), plain(types)
        options = list(types) if isinstance(types, tuple) else [types]
        if is_unknown(value):
            return UNKNOWN
        for t in options:
            if isinstance(t, Opaque) and t.name.startswith("builtins."):
                pytype = PYTHON_TYPES.get(t.name.rpartition(".")[2])
                if pytype is None:
                    return UNKNOWN
                if isinstance(value, (Obj, EnumMember, ClassRef, Function, Bound)):
                    continue
                if isinstance(value, pytype):  # as CPython: a bool is an int
                    return True
            elif isinstance(t, ClassRef):
                cls = value.cls if isinstance(value, (Obj, EnumMember)) else None
                if cls is None:
                    if isinstance(value, (str, int, float, bool, dict, list, tuple, type(None))):
                        continue
                    return UNKNOWN
                if any(a.key == t.info.key for a in self.tree.ancestors(cls)):
                    return True
            else:
                return UNKNOWN
        return False


PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "set": set,
}


def _shareable(value: Any) -> bool:
    """A value every call may be handed as it is: nothing in it has an identity of its own (no object)."""
    if isinstance(value, Obj):
        return False
    if isinstance(value, tuple):
        return all(_shareable(item) for item in value)
    return not isinstance(value, Many) or _shareable(value.element)


def field_default(value: ast.expr) -> ast.expr | None:
    """A class-level value as a dataclass field's default: `field(default=x)` / `Field(x)` mean x; a default
    factory means "computed" (None here)."""
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rpartition(".")[2] in ("field", "Field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return kw.value
        if value.args and not isinstance(value.args[0], ast.Starred):
            return value.args[0]
        return None
    return value


def _compares(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rpartition(".")[2] == "field":
        for kw in value.keywords:
            if kw.arg == "compare" and isinstance(kw.value, ast.Constant):
                return bool(kw.value.value)
    return True


def written_fields(obj: Obj, state: State) -> dict[str, Any]:
    """What the path `state` is on wrote to the fields of `obj`."""
    return {attr: settled(value) for (owner, attr), value in state.writes.items() if owner == id(obj)}


def is_classvar(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


# Bases whose subclasses are records (each annotated name a field the constructor fills), and class decorators
# that make one (dataclasses', attrs').
_RECORD_BASES = frozenset({"BaseModel", "NamedTuple", "TypedDict", "Struct", "BaseSettings"})
_RECORD_DECORATORS = frozenset({"dataclass", "define", "frozen", "mutable", "attrs", "s"})


def _is_dataclass(cls: ClassInfo, names: frozenset[str] = frozenset({"dataclass"})) -> bool:
    for decorator in cls.node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (dotted(target) or "").rpartition(".")[2] in names:
            return True
    return False


def declares_record(cls: ClassInfo) -> bool:
    """Whether the class itself is declared a record (a dataclass, attrs or pydantic class, a named tuple...): one
    whose instances are built field by field (a subclass of one is one too: see `ObjectModel._record`)."""
    bases = {(dotted(b) or "").rpartition(".")[2] for b in cls.node.bases}
    return _is_dataclass(cls, _RECORD_DECORATORS) or bool(bases & _RECORD_BASES)


def self_built(cls: ClassInfo) -> bool:
    """A frozen record (`@dataclass(frozen=True)`, a named tuple) that builds its instances itself, in class methods
    returning `cls(...)` (`from_server_args`): no code sets its fields after, so an instance known only by its class
    holds what one of those factories gave it (`ObjectModel._factory_field`). Read once per class: every read of a
    declared field or a typed member asks."""

    def read(node: ast.AST) -> bool:
        return _frozen_record(cls) and any(_builds_own_class(m) for m in cls.methods.values())

    return cached_on(cls.node, "self_built", read)  # type: ignore[no-any-return]


def _frozen_record(cls: ClassInfo) -> bool:
    if {(dotted(b) or "").rpartition(".")[2] for b in cls.node.bases} & {"NamedTuple"}:
        return True
    for decorator in cls.node.decorator_list:
        name = (dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) or "").rpartition(".")[2]
        if (
            name == "frozen"
            or isinstance(decorator, ast.Call)
            and name in _RECORD_DECORATORS
            and any(
                k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in decorator.keywords
            )
        ):
            return True
    return False


def _builds_own_class(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A class method every `return` of which builds the class it is called on (`return cls(...)`)."""
    if not any((dotted(d) or "") == "classmethod" for d in node.decorator_list) or not node.args.args:
        return False
    first = node.args.args[0].arg
    returns = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
    return bool(returns) and all(
        isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name) and r.value.func.id == first
        for r in returns
    )


def _positional_record(cls: ClassInfo) -> bool:
    """A class whose constructor takes its annotated fields in order: a dataclass, or a `NamedTuple` (written as a
    class, or as `namedtuple(...)`, which the program view reads as one)."""
    return _is_dataclass(cls) or _declares_named_tuple(cls)


def _declares_named_tuple(cls: ClassInfo) -> bool:
    """`class R(NamedTuple)`, or `namedtuple(...)` read as one."""
    return any((dotted(base) or "").rpartition(".")[2] == "NamedTuple" for base in cls.bases)


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _or_written(value: Any, written: Any) -> Any:
    """An attribute's value as read, or what the methods that write it wrote since (`_shadowed`, `_held_field`)."""
    return join_values([(value, frozenset()), (written, frozenset())])

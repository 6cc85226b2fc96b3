"""The `vllm serve` options of the served source: names, short flags, nargs, switches, choices and value types.

vLLM builds its parser in code: `make_arg_parser` adds a few options, then `FrontendArgs.add_cli_args` and
`EngineArgs.add_cli_args` add one option per config field, with argparse keywords derived from each field's type
annotation by `get_kwargs` (a `bool` becomes `--x/--no-x`, a `list[...]` takes one or more values, a config
dataclass takes JSON...). specguard reads that code with the static evaluator (`flow`): the `add_argument`
calls are recorded, and `get_kwargs` is answered by `field_kwargs` below, which applies the same type rules to
the annotations as written in the served source. Nothing of vLLM is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from specguard.deploy.evaluator import config_evaluator
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.paths import Frame, State
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    ClassRef,
    Function,
    Opaque,
    Token,
    TokenAttr,
    known,
)
from specguard.program.tree import ClassInfo, ParsedModule, SourceTree, dotted

# Where vLLM builds the `vllm serve` parser, and the helpers whose meaning specguard supplies itself.
SERVE_MODULE = "entrypoints/cli/serve.py"
PARSER_FACTORY = "make_arg_parser"
ENGINE_ARGS = ("engine/arg_utils.py", "EngineArgs", "add_cli_args")
ARGPARSE_UTILS = "utils/argparse_utils.py"
KWARGS_FUNCTIONS = ("get_kwargs", "_compute_kwargs")
OPTIONAL_WRAPPERS = ("optional_type",)
PARSE_WRAPPERS = ("parse_type",)
HUMAN_INT = ("human_readable_int", "human_readable_int_or_auto")
DICT_OR_STR = ("union_dict_and_str",)
JSON_NUMBER_EXPANSION = "_expand_json_human_readable_numbers"
# Plugin loading may add options at runtime; what a plugin adds cannot be read from the tree.
NOT_FOLLOWED = ("load_general_plugins",)


@dataclass(frozen=True)
class ValueKind:
    """How vLLM turns an option's string into a value.

    kind: int | human_int | float | str | bool | json | config | dict_or_str | custom
    """

    kind: str
    optional: bool = False  # "" and "None" mean None
    config: ClassInfo | None = None  # the dataclass a `config` value is validated against

    def describe(self) -> str:
        name = self.config.name if self.config is not None else self.kind
        return f"optional {name}" if self.optional else name


@dataclass(frozen=True)
class OptionDef:
    flags: tuple[str, ...]  # empty for a positional
    dest: str
    action: str  # store | store_true | store_false | store_const | append | count | boolean | help | version
    nargs: int | str | None = None
    const: Any = None
    choices: tuple[Any, ...] | None = None  # None: not checked (unknown or not restricted)
    value: ValueKind = ValueKind("str")
    complete: bool = True  # False: some of its argparse keywords could not be read from the source


@dataclass
class ServeOptions:
    """What the served source defines for `vllm serve`, and what of it specguard could not read."""

    options: list[OptionDef] = field(default_factory=list)
    # `--enable-x` is also `--disable-x` (and back) when the served FlexibleArgumentParser pairs them.
    inverse_prefixes: dict[str, str] = field(default_factory=dict)
    # `--spec-method` & co: dest -> the speculative-config key vLLM copies it into.
    spec_flags: dict[str, str] = field(default_factory=dict)
    json_number_expansion: bool = False
    problems: list[str] = field(default_factory=list)
    origin: str = ""

    @property
    def incomplete(self) -> bool:
        """Some definitions could not be read: an argument the parser does not know may be the source's fault."""
        return bool(self.problems) or not self.options

    def by_dest(self, dest: str) -> OptionDef | None:
        return next((o for o in self.options if o.dest == dest and o.flags), None)

    def flag_names(self) -> set[str]:
        return {f for o in self.options for f in o.flags}


# -- type annotations as vLLM's get_kwargs sees them -------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    """One member of a field's type: ("builtin", "int"), ("literal", values), ("generic", "list", args)..."""

    what: str
    name: str = ""
    values: tuple[Any, ...] = ()
    args: tuple[frozenset[Hint], ...] = ()
    cls: ClassInfo | None = None


NONE = Hint("none")
_BUILTIN_TYPES = {"int", "str", "float", "bool", "dict", "list", "tuple", "set", "bytes", "object", "frozenset"}
_TYPING_GENERICS = {
    "List": "list",
    "Dict": "dict",
    "Tuple": "tuple",
    "Set": "set",
    "FrozenSet": "frozenset",
    "Mapping": "dict",
    "Sequence": "list",
}


class TypeReader:
    """Reads annotations of one tree into Hint sets, following aliases and string forward references."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._dataclass: dict[tuple[str, str], bool] = {}

    def hints(self, expr: ast.expr | None, module: ParsedModule, depth: int = 0) -> frozenset[Hint]:
        if expr is None or depth > 12:
            return frozenset({Hint("unknown", "?")})
        if isinstance(expr, ast.Constant):
            if expr.value is None:
                return frozenset({NONE})
            if isinstance(expr.value, str):
                try:
                    parsed = ast.parse(expr.value, mode="eval").body
                except SyntaxError:
                    return frozenset({Hint("unknown", expr.value)})
                return self.hints(parsed, module, depth + 1)
            if expr.value is Ellipsis:
                return frozenset({Hint("ellipsis")})
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self.hints(expr.left, module, depth + 1) | self.hints(expr.right, module, depth + 1)
        if isinstance(expr, ast.Subscript):
            return self._subscript(expr, module, depth)
        name = dotted(expr)
        if name is None:
            return frozenset({Hint("unknown", ast.unparse(expr))})
        return self._named(name, module, depth)

    def _named(self, name: str, module: ParsedModule, depth: int) -> frozenset[Hint]:
        short = name.rpartition(".")[2]
        found = self.tree.resolve(module.name, name)
        if found is None:
            if short in _BUILTIN_TYPES:
                return frozenset({Hint("builtin", short)})
            if short in ("None", "NoneType"):
                return frozenset({NONE})
            if short in _TYPING_GENERICS:
                return frozenset({Hint("generic", _TYPING_GENERICS[short])})
            if short == "Any":
                return frozenset({Hint("any")})
            return frozenset({Hint("unknown", name)})
        if isinstance(found, ClassInfo):
            return frozenset({Hint("class", found.name, cls=found)})
        if isinstance(found, tuple):
            parsed, value = found
            if isinstance(value, ast.expr):
                return self.hints(value, parsed, depth + 1)
        return frozenset({Hint("unknown", name)})

    def _subscript(self, expr: ast.Subscript, module: ParsedModule, depth: int) -> frozenset[Hint]:
        head = dotted(expr.value) or ""
        short = head.rpartition(".")[2]
        elts = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if short == "Optional":
            return self.hints(elts[0], module, depth + 1) | {NONE}
        if short == "Union":
            out: frozenset[Hint] = frozenset()
            for elt in elts:
                out |= self.hints(elt, module, depth + 1)
            return out
        if short in ("Annotated", "SkipValidation", "Required", "NotRequired", "ReadOnly"):
            return self.hints(elts[0], module, depth + 1)
        if short in ("ClassVar", "InitVar", "Final"):
            return frozenset({Hint("classvar")})
        if short == "Literal":
            values: list[Any] = []
            for elt in elts:
                values.extend(self._literal_values(elt, module, depth))
            return frozenset({Hint("literal", values=tuple(values))})
        origin = short if short in _BUILTIN_TYPES else _TYPING_GENERICS.get(short)
        if origin is not None:
            args = tuple(self.hints(elt, module, depth + 1) for elt in elts)
            return frozenset({Hint("generic", origin, args=args)})
        if short == "type":
            return frozenset({Hint("unknown", ast.unparse(expr))})
        return self.hints(expr.value, module, depth + 1)  # a user generic `Config[T]` is its class

    def _literal_values(self, elt: ast.expr, module: ParsedModule, depth: int) -> list[Any]:
        if isinstance(elt, ast.Constant):
            return [elt.value]
        # Literal[OtherAlias, "x"]: Python flattens nested Literals.
        inner = self.hints(elt, module, depth + 1)
        return [v for h in inner if h.what == "literal" for v in h.values]

    def is_dataclass(self, cls: ClassInfo) -> bool:
        if cls.key in self._dataclass:
            return self._dataclass[cls.key]
        self._dataclass[cls.key] = False  # recursion guard
        result = any(self._makes_dataclass(d, cls) for k in self.tree.ancestors(cls) for d in k.node.decorator_list)
        self._dataclass[cls.key] = result
        return result

    def _makes_dataclass(self, decorator: ast.expr, cls: ClassInfo) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = dotted(target) or ""
        if name.rpartition(".")[2] == "dataclass":
            return True
        found = self.tree.resolve(cls.module, name) if name else None
        if isinstance(found, tuple) and isinstance(found[1], ast.FunctionDef):
            return _calls_dataclass(found[1])
        return False

    def is_dict_subclass(self, cls: ClassInfo) -> bool:
        names = self.tree.base_names(cls)
        return "dict" in names and "TypedDict" not in names

    def fields(self, cls: ClassInfo) -> list[tuple[str, ast.expr, ClassInfo]]:
        """A dataclass's fields in definition order, bases first (ClassVar and InitVar are not fields)."""
        out: dict[str, tuple[str, ast.expr, ClassInfo]] = {}
        for klass in reversed(self.tree.ancestors(cls)):
            for name, annotation in klass.annotations.items():
                text = ast.unparse(annotation)
                if text.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar", "KW_ONLY")):
                    continue
                out[name] = (name, annotation, klass)
        return list(out.values())


def _calls_dataclass(func: ast.FunctionDef) -> bool:
    return any(
        isinstance(sub, ast.Call) and (dotted(sub.func) or "").rpartition(".")[2] == "dataclass"
        for sub in ast.walk(func)
    )


def _contains(hints: frozenset[Hint], name: str) -> bool:
    return any((h.what == "builtin" and h.name == name) or (h.what == "generic" and h.name == name) for h in hints)


def _not_builtin(hint: Hint) -> bool:
    return hint.what in ("class", "any", "literal", "unknown")


def field_kwargs(reader: TypeReader, cls: ClassInfo, rules: KwargsRules) -> dict[str, dict[str, Any]]:
    """What vLLM's `get_kwargs(cls)` returns, as far as parsing is concerned (help and defaults left out)."""
    module = reader.tree.module(cls.module)
    out: dict[str, dict[str, Any]] = {}
    for name, annotation, owner in reader.fields(cls):
        owner_module = reader.tree.module(owner.module) or module
        assert owner_module is not None
        hints = reader.hints(annotation, owner_module)
        hints = frozenset(
            Hint("builtin", "dict") if h.what == "class" and h.cls and reader.is_dict_subclass(h.cls) else h
            for h in hints
        )
        out[name] = _kwargs_for(name, hints, reader, rules)
    return out


@dataclass(frozen=True)
class KwargsRules:
    """The two details of `get_kwargs` that vary between releases, read from the served function."""

    human_ints: frozenset[str] = frozenset()  # fields parsed as human-readable integers (`1k`, `2M`)
    none_choice: Any = None  # what an optional field adds to its choices: None, or the string "None" (older)


def _kwargs_for(name: str, hints: frozenset[Hint], reader: TypeReader, rules: KwargsRules) -> dict[str, Any]:
    kw: dict[str, Any] = {"default": UNKNOWN}
    dataclass_hint = next((h for h in hints if h.what == "class" and h.cls and reader.is_dataclass(h.cls)), None)
    literal = next((h for h in hints if h.what == "literal"), None)
    if dataclass_hint is not None:
        kw["type"] = ValueKind("config", config=dataclass_hint.cls)
    elif hints == {Hint("builtin", "bool"), Hint("builtin", "str"), NONE}:
        kw.update(type=ValueKind("str"), nargs="?", const=True)
    elif _contains(hints, "bool"):
        kw["action"] = Opaque("argparse.BooleanOptionalAction")
    elif literal is not None:
        kw["type"] = _literal_kind(literal.values)
        if not _contains(hints, "str"):
            kw["choices"] = sorted(literal.values, key=repr)
    elif _contains(hints, "tuple") or _contains(hints, "list") or _contains(hints, "set"):
        origin = next(o for o in ("tuple", "list", "set") if _contains(hints, o))
        generic = next((h for h in hints if h.what == "generic" and h.name == origin), None)
        args = generic.args if generic is not None else ()
        elem = args[0] if args else frozenset({Hint("builtin", "str")})
        fixed = origin == "tuple" and not any(Hint("ellipsis") in a for a in args) and args
        kw["nargs"] = len(args) if fixed else "+"
        elem_literal = next((h for h in elem if h.what == "literal"), None)
        if len(elem) > 1:
            kw["type"] = ValueKind("str")
        elif elem_literal is not None:
            kw["type"] = _literal_kind(elem_literal.values)
            kw["choices"] = sorted(elem_literal.values, key=repr)
        else:
            kw["type"] = _scalar_kind(elem)
    elif _contains(hints, "int"):
        kw["type"] = ValueKind("human_int" if name in rules.human_ints else "int")
    elif _contains(hints, "float"):
        kw["type"] = ValueKind("float")
    elif _contains(hints, "dict") and (_contains(hints, "str") or any(_not_builtin(h) for h in hints)):
        kw["type"] = ValueKind("dict_or_str")
    elif _contains(hints, "dict"):
        kw["type"] = ValueKind("json")
    elif _contains(hints, "str") or any(_not_builtin(h) for h in hints):
        kw["type"] = ValueKind("str")
    else:
        kw["type"] = ValueKind("custom")
    if NONE in hints and not _contains(hints, "bool") and isinstance(kw.get("type"), ValueKind):
        kind: ValueKind = kw["type"]
        kw["type"] = ValueKind(kind.kind, True, kind.config)
        if "choices" in kw:
            kw["choices"] = [*kw["choices"], rules.none_choice]
    return kw


def _literal_kind(values: tuple[Any, ...]) -> ValueKind:
    first = values[0] if values else ""
    if isinstance(first, bool):
        return ValueKind("bool")
    if isinstance(first, int):
        return ValueKind("int")
    if isinstance(first, float):
        return ValueKind("float")
    return ValueKind("str")


def _scalar_kind(hints: frozenset[Hint]) -> ValueKind:
    for name in ("int", "float"):
        if _contains(hints, name):
            return ValueKind(name)
    if _contains(hints, "dict"):
        return ValueKind("json")
    return ValueKind("str")


# -- running vLLM's parser construction ---------------------------------------------------------------------------


class _Builder:
    """The evaluator hook: records `add_argument` calls and answers `get_kwargs` and the type helpers."""

    def __init__(self, tree: SourceTree, reader: TypeReader, rules: KwargsRules) -> None:
        self.tree = tree
        self.reader = reader
        self.rules = rules
        self.result = ServeOptions()
        self.unread: list[str] = []  # options whose keywords (type, nargs, ...) could not be read

    def __call__(
        self,
        ev: Evaluator,
        func: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        node: ast.AST,
        frame: Frame,
        state: State,
    ) -> Any:
        if isinstance(func, TokenAttr):
            if func.attr in ("add_argument_group", "add_mutually_exclusive_group"):
                return func.token
            if func.attr == "add_argument":
                self._add(args, kwargs, node, frame)
                return Token("action")
            return None
        if isinstance(func, Function):
            name = func.name
            if name in KWARGS_FUNCTIONS and args and isinstance(args[0], ClassRef):
                return field_kwargs(self.reader, args[0].info, self.rules)
            if name in OPTIONAL_WRAPPERS and args:
                inner = _as_kind(args[0])
                return ValueKind(inner.kind, True, inner.config)
            if name in PARSE_WRAPPERS and args:
                return _as_kind(args[0])
            if name in NOT_FOLLOWED:
                return None
        return NOT_HANDLED

    def _add(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame) -> None:
        where = f"{self.tree.relpath(frame.module.path)}:{getattr(node, 'lineno', 0)}"
        if not all(isinstance(a, str) for a in args) or not args:
            self.result.problems.append(f"an option whose name is not a literal ({where})")
            return
        complete = STAR_KWARGS not in kwargs and kwargs.get("nargs") is not UNKNOWN
        if not complete:
            self.unread.append(args[0])
        flags = tuple(a for a in args if a.startswith("-"))
        positional = not flags
        dest = kwargs.get("dest")
        if not isinstance(dest, str):
            if positional:
                dest = args[0]
            else:
                longs = [f for f in flags if f.startswith("--")] or list(flags)
                dest = longs[0].lstrip("-").replace("-", "_")
        action = _action(kwargs.get("action", "store"), self.tree)
        nargs = kwargs.get("nargs")
        if nargs is UNKNOWN:
            nargs = None
        choices = kwargs.get("choices")
        choice_tuple = tuple(choices) if isinstance(choices, (list, tuple, set)) and known(list(choices)) else None
        if isinstance(choices, (set, frozenset)) and choice_tuple is not None:
            choice_tuple = tuple(sorted(choice_tuple, key=repr))
        self.result.options.append(
            OptionDef(
                flags=flags,
                dest=dest,
                action=action,
                nargs=nargs if isinstance(nargs, (int, str)) else None,
                const=kwargs.get("const"),
                choices=choice_tuple,
                value=_as_kind(kwargs.get("type")),
                complete=complete,
            )
        )


def _action(value: Any, tree: SourceTree) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Opaque) and value.name.endswith("BooleanOptionalAction"):
        return "boolean"
    if isinstance(value, ClassRef):
        if "BooleanOptionalAction" in tree.base_names(value.info):
            return "boolean"
        return "store"  # a custom Action: it stores what it is given, with the nargs it declares
    return "store"


def _as_kind(value: Any) -> ValueKind:
    if isinstance(value, ValueKind):
        return value
    if value is None:
        return ValueKind("str")
    if isinstance(value, Opaque):
        short = value.name.rpartition(".")[2]
        if value.name.startswith("builtins.") and short in ("int", "float", "str"):
            return ValueKind(short)
        if short == "loads":
            return ValueKind("json")
        return ValueKind("custom")
    if isinstance(value, Function):
        if value.name in HUMAN_INT:
            return ValueKind("human_int")
        if value.name in DICT_OR_STR:
            return ValueKind("dict_or_str")
    return ValueKind("custom")


def _kwargs_rules(tree: SourceTree) -> KwargsRules:
    """Read from the served `get_kwargs`: the field names it parses as human-readable integers (a set of names
    and `name == "..."` tests), and what it appends to an optional field's choices."""
    parsed = tree.module_for_path(ENGINE_ARGS[0])
    names: set[str] = set()
    none_choice: Any = None
    if parsed is None:
        return KwargsRules()
    for fname in KWARGS_FUNCTIONS:
        func = parsed.functions.get(fname)
        if func is None:
            continue
        for sub in ast.walk(func):
            if isinstance(sub, ast.Set) and all(isinstance(e, ast.Constant) for e in sub.elts):
                names.update(str(e.value) for e in sub.elts if isinstance(e, ast.Constant))
            elif (
                isinstance(sub, ast.Compare)
                and isinstance(sub.left, ast.Name)
                and sub.left.id == "name"
                and isinstance(sub.comparators[0], ast.Constant)
            ):
                names.add(str(sub.comparators[0].value))
            elif (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "append"
                and "choices" in ast.unparse(sub.func.value)
                and len(sub.args) == 1
                and isinstance(sub.args[0], ast.Constant)
            ):
                none_choice = sub.args[0].value
    return KwargsRules(frozenset(names), none_choice)


def _inverse_prefixes(tree: SourceTree) -> dict[str, str]:
    """`--enable-` <-> `--disable-` pairs, if the served FlexibleArgumentParser registers such an action."""
    parsed = tree.module_for_path(ARGPARSE_UTILS)
    if parsed is None or "FlexibleArgumentParser" not in parsed.classes:
        return {}
    init = parsed.classes["FlexibleArgumentParser"].methods.get("__init__")
    if init is None:
        return {}
    for sub in ast.walk(init):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "register"
            and len(sub.args) == 3
            and isinstance(sub.args[2], ast.Name)
        ):
            cls = tree.resolve_class(parsed.name, sub.args[2].id)
            value = cls.attributes.get("_inverse_prefixes") if cls is not None else None
            if isinstance(value, ast.Dict):
                try:
                    return dict(ast.literal_eval(value))
                except (ValueError, SyntaxError):
                    return {}
    return {}


def _spec_flags(tree: SourceTree) -> dict[str, str]:
    """`(--spec-method, "method", self.spec_method)` triples: options EngineArgs copies into speculative_config."""
    parsed = tree.module_for_path(ENGINE_ARGS[0])
    cls = parsed.classes.get(ENGINE_ARGS[1]) if parsed is not None else None
    func = cls.methods.get("create_speculative_config") if cls is not None else None
    out: dict[str, str] = {}
    if func is None:
        return out
    for sub in ast.walk(func):
        if isinstance(sub, ast.Tuple) and len(sub.elts) == 3:
            flag, key, attr = sub.elts
            if (
                isinstance(flag, ast.Constant)
                and isinstance(key, ast.Constant)
                and isinstance(attr, ast.Attribute)
                and isinstance(attr.value, ast.Name)
                and attr.value.id == "self"
            ):
                out[attr.attr] = str(key.value)
    return out


def read_serve_options(tree: SourceTree) -> ServeOptions:
    """Run the served parser construction statically and return every option it defines."""
    reader = TypeReader(tree)
    builder = _Builder(tree, reader, _kwargs_rules(tree))
    result = builder.result
    ev = config_evaluator(tree, hook=builder, max_depth=6)
    serve = tree.module_for_path(SERVE_MODULE)
    factory = ev.module_value(serve, PARSER_FACTORY) if serve is not None else UNKNOWN
    parser = Token("parser")
    unreadable_before = dict(tree.unreadable)
    try:
        if isinstance(factory, Function):
            result.origin = f"{tree.relpath(factory.module.path)}:{factory.name}"
            ev.call_function(factory, [parser], {})
        else:
            engine = tree.module_for_path(ENGINE_ARGS[0])
            cls = engine.classes.get(ENGINE_ARGS[1]) if engine is not None else None
            method = cls.methods.get(ENGINE_ARGS[2]) if cls is not None else None
            if engine is None or cls is None or method is None:
                result.problems.append("neither `make_arg_parser` nor `EngineArgs.add_cli_args` was found")
                return result
            result.origin = f"{ENGINE_ARGS[0]}:{ENGINE_ARGS[1]}.{ENGINE_ARGS[2]}"
            result.problems.append(f"{SERVE_MODULE} has no `{PARSER_FACTORY}`: only EngineArgs options were read")
            ev.call_function(Function(engine, method, cls), [parser], {})
    except OutOfBudget:
        result.problems.append("the parser construction was too costly to evaluate; some options may be missing")
    if builder.unread:
        more = len(builder.unread) - 3
        shown = ", ".join(builder.unread[:3]) + (f" and {more} more" if more > 0 else "")
        result.problems.append(f"the keywords of {len(builder.unread)} options could not be read ({shown})")
    result.problems += [
        f"{rel} could not be read ({why})" for rel, why in tree.unreadable.items() if rel not in unreadable_before
    ]
    result.inverse_prefixes = _inverse_prefixes(tree)
    result.spec_flags = _spec_flags(tree)
    engine = tree.module_for_path(ENGINE_ARGS[0])
    result.json_number_expansion = engine is not None and JSON_NUMBER_EXPANSION in engine.functions
    return result


def serve_options(tree: SourceTree) -> ServeOptions:
    """The served options; a fork whose parser code the evaluator cannot follow gets a note, not a crash."""
    try:
        return read_serve_options(tree)
    except Exception as exc:  # noqa: BLE001 - a fork's unusual parser code must not crash the pre-flight
        return ServeOptions(problems=[f"reading the parser construction failed ({type(exc).__name__}: {exc})"])

"""Facts about the served vLLM source that hazards depend on, read from its files (never imported).

Findings come from the same engine as `specguard check`; class attributes, registries and enum members are read
with libcst through SourceTree. Each fact is computed once per source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import libcst as cst

from specguard.deploy.source import ClassInfo, SourceTree, literal_strings, literal_value


@dataclass(frozen=True)
class SourceFinding:
    """A `specguard check` finding, located relative to the vllm/ package dir."""

    code: str
    path: Path
    line: int
    relpath: str

    def where(self) -> str:
        return f"{self.code} at {self.relpath}:{self.line}"


@dataclass(frozen=True)
class BackendInfo:
    name: str
    backend: ClassInfo
    builder: ClassInfo | None


@dataclass
class SourceFacts:
    tree: SourceTree
    _speculators: dict[tuple[str, ...], dict[str, list[ClassInfo]]] = field(default_factory=dict)
    analysis_problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path) -> SourceFacts:
        return cls(SourceTree.open(path))

    @cached_property
    def version(self) -> str | None:
        return self.tree.version()

    @property
    def label(self) -> str:
        return f"vLLM {self.version or '(unknown version)'} at {self.tree.root}"

    def _module(self, relpath: str) -> Any:
        return self.tree.module_for_path(relpath)

    # -- findings from the analyzer -------------------------------------------------------------------------

    @cached_property
    def findings(self) -> list[SourceFinding]:
        """`specguard check` over the served tree (cached by the engine between runs)."""
        # Deferred: the analyzer is heavier than loading a config.
        from specguard.analysis.engine import check_paths
        from specguard.settings import Settings, user_cache_dir

        result = check_paths([self.tree.root], Settings(cache_dir=user_cache_dir()))
        # A file the analyzer could not read (SG000) or a discovery error may hide a finding a hazard needs.
        self.analysis_problems = [
            *result.errors,
            *(f"{f.path}: {f.message}" for f in result.findings if f.code == "SG000"),
        ]
        out: list[SourceFinding] = []
        for f in result.findings:
            path = Path(f.path).resolve()
            try:
                rel = path.relative_to(self.tree.root).as_posix()
            except ValueError:
                rel = str(f.path)
            out.append(SourceFinding(f.code, path, int(f.line), rel))
        return out

    def findings_in(self, classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        """Findings of `rules` that lie inside one of `classes` (by file and line span)."""
        hits: list[SourceFinding] = []
        for finding in self.findings:
            if finding.code not in rules:
                continue
            for cls in classes:
                if finding.path != cls.path.resolve():
                    continue
                start, end = self.tree.span(cls)
                if start <= finding.line <= end:
                    hits.append(finding)
                    break
        return sorted(set(hits), key=lambda f: (f.relpath, f.line, f.code))

    def findings_in_lineage(self, classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        """Findings of `rules` inside `classes` or any class they inherit from (each class read once)."""
        lineage = {(a.module, a.name): a for c in classes for a in self.ancestors(c)}
        return self.findings_in(list(lineage.values()), rules)

    def findings_of(self, rules: list[str]) -> list[SourceFinding]:
        return sorted({f for f in self.findings if f.code in rules}, key=lambda f: (f.relpath, f.line, f.code))

    # -- speculative methods and their speculator classes ---------------------------------------------------

    def method_speculators(
        self,
        registry_file: str,
        function: str,
        predicate_file: str | None = None,
        predicate_class: str | None = None,
    ) -> dict[str, list[ClassInfo]]:
        """method string -> the speculator classes the registry function may build for it.

        Read from the if/elif chain of e.g. `init_speculator`: a branch tested with `<x>.method == "m"` (or
        `in (...)`) contributes every class it instantiates in a `return C(...)`. A branch tested by a predicate
        (`speculative_config.use_eagle()`) is read through that method of `predicate_class`. A method an earlier
        plain comparison already took is not given to later branches: the chain never reaches them for it.
        """
        key = (registry_file, function, predicate_file or "", predicate_class or "")
        if key in self._speculators:
            return self._speculators[key]
        parsed = self._module(registry_file)
        result: dict[str, list[ClassInfo]] = {}
        if parsed is not None:
            func = next(
                (s for s in parsed.module.body if isinstance(s, cst.FunctionDef) and s.name.value == function),
                None,
            )
            predicates = self._predicates(predicate_file, predicate_class)
            taken: set[str] = set()
            if func is not None:
                for test, body in _branches(func.body):
                    methods, exact = _branch_methods(test, predicates)
                    methods = [m for m in methods if m not in taken]
                    if exact:
                        taken.update(methods)
                    if not methods:
                        continue
                    local = _local_imports(body, parsed.name, parsed.imports)
                    classes = []
                    for name in _returned_calls(body):
                        module, cname = local.get(name, (parsed.name, name))
                        info = self.tree.resolve_class(module, cname)
                        if info is not None and info not in classes:
                            classes.append(info)
                    for method in methods:
                        result.setdefault(method, []).extend(c for c in classes if c not in result.get(method, []))
        self._speculators[key] = result
        return result

    def _predicates(self, relpath: str | None, cls_name: str | None) -> dict[str, cst.FunctionDef]:
        """Methods of the config class the registry calls as predicates (`use_eagle`), by name."""
        if relpath is None or cls_name is None:
            return {}
        parsed = self._module(relpath)
        if parsed is None or cls_name not in parsed.classes:
            return {}
        body = parsed.classes[cls_name].node.body.body
        return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}

    def ancestors(self, cls: ClassInfo) -> list[ClassInfo]:
        return self.tree.ancestors(cls)

    def descends_from(self, cls: ClassInfo, name: str) -> bool:
        return any(a.name == name for a in self.tree.ancestors(cls))

    # -- enums and Literal aliases ---------------------------------------------------------------------------

    def literal_alias(self, relpath: str, symbol: str) -> list[str] | None:
        """Members of a module-level `X = Literal[...]` alias, following aliases it names."""
        parsed = self._module(relpath)
        if parsed is None:
            return None
        assigns: dict[str, cst.BaseExpression] = {}
        for stmt in parsed.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign):
                        for t in small.targets:
                            if isinstance(t.target, cst.Name):
                                assigns[t.target.value] = small.value
                    elif (
                        isinstance(small, cst.AnnAssign)
                        and small.value is not None
                        and isinstance(small.target, cst.Name)
                    ):
                        assigns[small.target.value] = small.value
        if symbol not in assigns:
            return None
        out: list[str] = []

        def walk(expr: cst.BaseExpression, seen: frozenset[str]) -> None:
            if isinstance(expr, cst.Subscript):
                for el in expr.slice:
                    if isinstance(el.slice, cst.Index):
                        walk(el.slice.value, seen)
            elif isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
                out.extend(literal_strings(expr))
            elif isinstance(expr, cst.Name) and expr.value in assigns and expr.value not in seen:
                walk(assigns[expr.value], seen | {expr.value})
            elif isinstance(expr, cst.BinaryOperation):  # Literal[...] | Literal[...]
                walk(expr.left, seen)
                walk(expr.right, seen)

        walk(assigns[symbol], frozenset({symbol}))
        return list(dict.fromkeys(out))

    def enum_members(self, relpath: str, symbol: str) -> list[str] | None:
        """Public member names of an Enum class defined in `relpath`."""
        parsed = self._module(relpath)
        if parsed is None or symbol not in parsed.classes:
            return None
        return [n for n in parsed.classes[symbol].attributes if not n.startswith("_")]

    def accepted_values(self, relpath: str, symbol: str) -> list[str] | None:
        values = self.literal_alias(relpath, symbol)
        return values if values is not None else self.enum_members(relpath, symbol)

    # -- attention backends ----------------------------------------------------------------------------------

    def backend(self, registry_file: str, name: str) -> BackendInfo | None:
        """The backend class an AttentionBackendEnum member names, and its metadata builder class."""
        parsed = self._module(registry_file)
        if parsed is None:
            return None
        for cls in parsed.classes.values():
            value = cls.attributes.get(name)
            if value is None:
                continue
            dotted = "".join(literal_strings(value))
            module, _, cname = dotted.rpartition(".")
            if not module:
                return None
            backend = self.tree.resolve_class(module, cname)
            if backend is None:
                return None
            return BackendInfo(name, backend, self._builder_of(backend))
        return None

    def _builder_of(self, backend: ClassInfo) -> ClassInfo | None:
        for klass in self.tree.ancestors(backend):
            for stmt in klass.node.body.body:
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "get_builder_cls":
                    for name in _returned_names(stmt.body):
                        resolved = self.tree.resolve_class(klass.module, name)
                        if resolved is not None:
                            return resolved
        return None

    def class_attribute(self, cls: ClassInfo, attr: str) -> tuple[object, ClassInfo] | None:
        found = self.tree.class_attribute(cls, attr)
        if found is None:
            return None
        value, owner = found
        return literal_value(value), owner

    def interleave_requirement(self, cls: ClassInfo, suffix: str) -> tuple[int, int] | None:
        """(required value, line) if the module of `cls` refuses an `*interleave_size` other than a literal.

        Recognises `assert <x>interleave_size == N` and `if ... <x>interleave_size != N ...: raise`, the two
        ways vLLM backends have written the check.
        """
        parsed = self.tree.module(cls.module)
        if parsed is None:
            return None
        finder = _RequirementFinder(suffix)
        parsed.module.visit(finder)
        if finder.found is None:
            return None
        value, node = finder.found
        return value, self.tree.positions(cls.module)[node].start.line

    # -- validation evidence ---------------------------------------------------------------------------------

    def has_evidence(self, relpath: str, kind: str, text: str) -> bool:
        """Whether `relpath` raises/asserts (kind "raise") or logs a warning (kind "warning") containing text."""
        found = self.tree.file_of(".".join([self.tree.package, *Path(relpath).with_suffix("").parts]))
        if found is None:
            return False
        # Cheap text prefilter: every word of the message must occur in the file before it is worth parsing.
        raw = found[0].read_text(encoding="utf-8", errors="replace")
        if not all(word in raw for word in text.split()):
            return False
        parsed = self._module(relpath)
        if parsed is None:
            return False
        finder = _EvidenceFinder(kind)
        parsed.module.visit(finder)
        return any(text in s for s in finder.strings)

    # -- options the served vLLM accepts ---------------------------------------------------------------------

    @cached_property
    def engine_options(self) -> set[str]:
        """Dashed names of EngineArgs fields: real `vllm serve` options, never reported as misspellings."""
        parsed = self._module("engine/arg_utils.py")
        if parsed is None or "EngineArgs" not in parsed.classes:
            return set()
        return {name.replace("_", "-") for name in parsed.classes["EngineArgs"].attributes}


# -- libcst helpers ---------------------------------------------------------------------------------------------


def _branches(body: cst.BaseSuite) -> list[tuple[cst.BaseExpression, cst.BaseSuite]]:
    """Every (test, body) of the if/elif chains at the top level of a function body."""
    out: list[tuple[cst.BaseExpression, cst.BaseSuite]] = []
    for stmt in getattr(body, "body", ()):
        node: Any = stmt
        while isinstance(node, cst.If):  # an `elif` is an If stored in orelse
            out.append((node.test, node.body))
            node = node.orelse
    return out


def _methods_tested(test: cst.BaseExpression, negated: bool = False) -> list[str]:
    """`spec.method == "x"` / `spec.method in ("x", "y")` (and with `negated`, `!=` / `not in`) -> strings."""
    ops: tuple[type, ...] = (cst.Equal, cst.In) + ((cst.NotEqual, cst.NotIn) if negated else ())
    methods: list[str] = []
    for comp in _comparisons(test):
        left = comp.left
        if not (isinstance(left, cst.Attribute) and left.attr.value == "method"):
            continue
        for target in comp.comparisons:
            if isinstance(target.operator, ops):
                methods.extend(literal_strings(target.comparator))
    return methods


def _branch_methods(test: cst.BaseExpression, predicates: dict[str, cst.FunctionDef]) -> tuple[list[str], bool]:
    """The methods an if-test selects, and whether it selects exactly them (no other condition)."""
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute) and not test.args:
        func = predicates.get(test.func.attr.value)
        if func is None:
            return [], False
        stmts = [s for s in func.body.body if isinstance(s, cst.SimpleStatementLine)]
        only_return = len(func.body.body) == 1 and len(stmts) == 1 and isinstance(stmts[0].body[0], cst.Return)
        if only_return:
            ret = stmts[0].body[0]
            assert isinstance(ret, cst.Return)
            if isinstance(ret.value, cst.Comparison):
                return _methods_tested(ret.value), True
        # A compound predicate (`method == "mtp" and <draft config>`) may or may not hold for its methods.
        methods: list[str] = []

        class _V(cst.CSTVisitor):
            def visit_Comparison(self, node: cst.Comparison) -> None:
                methods.extend(_methods_tested(node, negated=True))

        func.body.visit(_V())
        return list(dict.fromkeys(methods)), False
    return _methods_tested(test), isinstance(test, cst.Comparison)


def _comparisons(expr: cst.BaseExpression) -> list[cst.Comparison]:
    if isinstance(expr, cst.Comparison):
        return [expr]
    if isinstance(expr, cst.BooleanOperation):
        return _comparisons(expr.left) + _comparisons(expr.right)
    return []


def _local_imports(
    body: cst.BaseSuite, module: str, module_imports: dict[str, tuple[str, str]]
) -> dict[str, tuple[str, str]]:
    """Function-local `from m import C` inside a branch (vLLM imports speculators lazily there)."""
    local = dict(module_imports)

    class _V(cst.CSTVisitor):
        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if isinstance(node.names, cst.ImportStar) or node.relative or node.module is None:
                return
            src = cst.Module(body=[]).code_for_node(node.module)
            for alias in node.names:
                if isinstance(alias.name, cst.Name):
                    asname = alias.asname.name if alias.asname else None
                    name = asname.value if isinstance(asname, cst.Name) else alias.name.value
                    local[name] = (src, alias.name.value)

    body.visit(_V())
    return local


def _returned_calls(body: cst.BaseSuite) -> list[str]:
    names: list[str] = []

    class _V(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            if isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Name):
                names.append(node.value.func.value)

    body.visit(_V())
    return names


def _returned_names(body: cst.BaseSuite) -> list[str]:
    names: list[str] = []

    class _V(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            if isinstance(node.value, cst.Name):
                names.append(node.value.value)

    body.visit(_V())
    return names


def _ends_with(expr: cst.BaseExpression, suffix: str) -> bool:
    if isinstance(expr, cst.Name):
        return expr.value.endswith(suffix)
    if isinstance(expr, cst.Attribute):
        return expr.attr.value.endswith(suffix)
    return False


class _RequirementFinder(cst.CSTVisitor):
    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.found: tuple[int, cst.CSTNode] | None = None

    def _required(self, test: cst.BaseExpression, op: type[cst.BaseCompOp]) -> int | None:
        for comp in _comparisons(test):
            if not _ends_with(comp.left, self.suffix) or len(comp.comparisons) != 1:
                continue
            target = comp.comparisons[0]
            if isinstance(target.operator, op) and isinstance(target.comparator, cst.Integer):
                return int(target.comparator.value, 0)
        return None

    def visit_Assert(self, node: cst.Assert) -> None:
        value = self._required(node.test, cst.Equal)
        if value is not None and self.found is None:
            self.found = (value, node)

    def visit_If(self, node: cst.If) -> None:
        value = self._required(node.test, cst.NotEqual)
        if value is None or self.found is not None:
            return
        raises = any(
            isinstance(small, cst.Raise)
            for stmt in getattr(node.body, "body", ())
            if isinstance(stmt, cst.SimpleStatementLine)
            for small in stmt.body
        )
        if raises:
            self.found = (value, node)


class _EvidenceFinder(cst.CSTVisitor):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.strings: list[str] = []

    def visit_Raise(self, node: cst.Raise) -> None:
        if self.kind == "raise" and node.exc is not None:
            self.strings.extend(_joined(node.exc))

    def visit_Assert(self, node: cst.Assert) -> None:
        if self.kind == "raise" and node.msg is not None:
            self.strings.extend(_joined(node.msg))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if self.kind == "warning" and isinstance(func, cst.Attribute) and func.attr.value.startswith("warn"):
            self.strings.extend(_joined(node))


def _joined(node: cst.CSTNode) -> list[str]:
    # A message is often split over several literals in one call; search their concatenation too.
    parts = literal_strings(node)
    return [*parts, "".join(parts)]


def open_source(path: str | Path | None) -> SourceFacts | None:
    """`--vllm-source DIR`, else the vLLM installed here (located, not imported), else None."""
    if path is not None:
        return _facts_for(SourceTree.open(path).root)
    installed = installed_vllm_dir()
    return _facts_for(SourceTree.open(installed).root) if installed is not None else None


@lru_cache(maxsize=4)
def _facts_for(root: Path) -> SourceFacts:
    # One SourceFacts per tree per process: a second config against the same source reuses its parses.
    return SourceFacts(SourceTree(root))


def installed_vllm_dir() -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")  # finds a top-level package without executing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        if (Path(location) / "__init__.py").is_file():
            return Path(location)
    return None

"""Facts about the served vLLM source that hazards depend on, read from its files (never imported).

Findings come from the same engine as `specguard check`; registries, enums, class attributes and the served
option definitions are read from the `ast` of the few modules a hazard needs. Each fact is computed once per
source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from specguard.deploy.arguments import ServeOptions, serve_options
from specguard.deploy.tree_check import TreeChecker
from specguard.deploy.vllm_tree import not_vllm
from specguard.errors import UserError
from specguard.program.discover import modules_fingerprint
from specguard.program.tree import ClassInfo, SourceLeftUnread, SourceTree, literal_strings, literal_value


@dataclass(frozen=True)
class SourceFinding:
    """A `specguard check` finding, located relative to the vllm/ package dir."""

    code: str
    path: Path
    line: int
    relpath: str
    why: str = ""  # for a site the rule could not decide: on what it depends

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
    # `specguard check` over the tree, handed in by the composition; None: no hazard that needs a finding is judged
    check: TreeChecker | None = None
    analysis_problems: list[str] = field(default_factory=list)
    # When `specguard check` over the tree stopped at its budget: which part was spent, and the files it analyzed.
    analysis_left: tuple[str, frozenset[Path]] | None = None
    # The sites `specguard check` over the tree could not decide, each with why.
    undecided: list[SourceFinding] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path, check: TreeChecker | None = None) -> SourceFacts:
        return cls(SourceTree.open(path), check)

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
        """`specguard check` over the served tree (cached by the engine between runs). Raises `SourceLeftUnread`
        when no checker was handed in."""
        if self.check is None:
            raise SourceLeftUnread("`specguard check` was not run on the served source (no analyzer was handed in)")
        checked = self.check(self.tree.root)
        self.analysis_problems = list(checked.problems)
        self.analysis_left = checked.left
        self.undecided = [
            SourceFinding(f.code, f.path, f.line, self.tree.relpath(f.path), f.message) for f in checked.undecided
        ]
        return [SourceFinding(f.code, f.path, f.line, self.tree.relpath(f.path)) for f in checked.findings]

    def undecided_in_lineage(self, classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        """The sites of `rules` that `specguard check` could not decide inside `classes` or a class they inherit
        from, each with why."""
        self.findings  # noqa: B018 - the check that fills `undecided`
        lineage = {a.key: a for c in classes for a in self.tree.ancestors(c)}
        return self._inside(self.undecided, list(lineage.values()), rules)

    def findings_in(self, classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        """Findings of `rules` that lie inside one of `classes` (by file and line span). Raises `SourceLeftUnread`
        when one of their files was left unanalyzed by the budget."""
        findings = self.findings
        if self.analysis_left is not None:
            spent, analyzed = self.analysis_left
            left = sorted({self.tree.relpath(c.path) for c in classes if c.path.resolve() not in analyzed})
            if left:
                raise SourceLeftUnread(_analysis_left(spent, ", ".join(left)))
        return self._inside(findings, classes, rules)

    @staticmethod
    def _inside(found: list[SourceFinding], classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        hits: list[SourceFinding] = []
        for finding in found:
            if finding.code not in rules:
                continue
            for cls in classes:
                end = cls.node.end_lineno or cls.node.lineno
                if finding.path == cls.path.resolve() and cls.node.lineno <= finding.line <= end:
                    hits.append(finding)
                    break
        return sorted(set(hits), key=lambda f: (f.relpath, f.line, f.code))

    def findings_in_lineage(self, classes: list[ClassInfo], rules: list[str]) -> list[SourceFinding]:
        """Findings of `rules` inside `classes` or any class they inherit from (each class read once)."""
        lineage = {a.key: a for c in classes for a in self.tree.ancestors(c)}
        return self.findings_in(list(lineage.values()), rules)

    def findings_of(self, rules: list[str]) -> list[SourceFinding]:
        """Findings of `rules` anywhere in the tree. Raises `SourceLeftUnread` when the budget left files
        unanalyzed."""
        findings = self.findings
        if self.analysis_left is not None:
            raise SourceLeftUnread(_analysis_left(self.analysis_left[0], "the files past it"))
        return sorted({f for f in findings if f.code in rules}, key=lambda f: (f.relpath, f.line, f.code))

    # -- speculator classes ----------------------------------------------------------------------------------

    def descends_from(self, cls: ClassInfo, name: str) -> bool:
        return any(a.name == name for a in self.tree.ancestors(cls))

    # -- enums and Literal aliases ---------------------------------------------------------------------------

    def literal_alias(self, relpath: str, symbol: str) -> list[str] | None:
        """Members of a module-level `X = Literal[...]` alias, following aliases it names."""
        parsed = self._module(relpath)
        if parsed is None or symbol not in parsed.assigns:
            return None
        out: list[str] = []

        def walk(expr: ast.expr, seen: frozenset[str]) -> None:
            if isinstance(expr, ast.Subscript):
                elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
                for el in elts:
                    walk(el, seen)
            elif isinstance(expr, (ast.Constant, ast.JoinedStr)):
                out.extend(literal_strings(expr))
            elif isinstance(expr, ast.Name) and expr.id in parsed.assigns and expr.id not in seen:
                walk(parsed.assigns[expr.id], seen | {expr.id})
            elif isinstance(expr, ast.BinOp):  # Literal[...] | Literal[...]
                walk(expr.left, seen)
                walk(expr.right, seen)

        walk(parsed.assigns[symbol], frozenset({symbol}))
        return list(dict.fromkeys(out))

    def enum_members(self, relpath: str, symbol: str) -> list[str] | None:
        """Public member names of an Enum class defined in `relpath`."""
        parsed = self._module(relpath)
        if parsed is None or symbol not in parsed.classes:
            return None
        return self.tree.enum_members(parsed.classes[symbol])

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
            target = "".join(literal_strings(value))
            module, _, cname = target.rpartition(".")
            if not module:
                return None
            backend = self.tree.resolve_class(module, cname)
            if backend is None:
                return None
            return BackendInfo(name, backend, self._builder_of(backend))
        return None

    def _builder_of(self, backend: ClassInfo) -> ClassInfo | None:
        for klass in self.tree.ancestors(backend):
            method = klass.methods.get("get_builder_cls")
            if method is None:
                continue
            for sub in ast.walk(method):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Name):
                    resolved = self.tree.resolve_class(klass.module, sub.value.id)
                    if resolved is None:
                        resolved = self._local_class(method, klass.module, sub.value.id)
                    if resolved is not None:
                        return resolved
        return None

    def _local_class(self, method: ast.AST, module: str, name: str) -> ClassInfo | None:
        """A class the method imports inside its body (`from .x import Builder; return Builder`)."""
        parsed = self.tree.module(module)
        if parsed is None:
            return None
        for sub in ast.walk(method):
            if isinstance(sub, ast.ImportFrom) and any((a.asname or a.name) == name for a in sub.names):
                alias = next(a for a in sub.names if (a.asname or a.name) == name)
                source = sub.module or ""
                if sub.level:
                    parts = module.split(".")[: -sub.level] if not parsed.is_package else module.split(".")
                    source = ".".join([*parts, source] if source else parts)
                return self.tree.resolve_class(source, alias.name)
        return None

    def class_attribute(self, cls: ClassInfo, attr: str) -> tuple[object, ClassInfo] | None:
        found = self.tree.class_attribute(cls, attr)
        if found is None:
            return None
        value, owner = found
        return literal_value(value), owner

    # -- options the served vLLM accepts ---------------------------------------------------------------------

    @cached_property
    def serve_options(self) -> ServeOptions:
        """The `vllm serve` options the served source defines (read from its parser construction)."""
        return serve_options(self.tree)


def _analysis_left(spent: str, left: str) -> str:
    return f"`specguard check` read part of the served source only ({spent}, its budget); it did not analyze {left}"


def open_source(path: str | Path | None, check: TreeChecker | None = None) -> SourceFacts | None:
    """`--vllm-source DIR`, else the vLLM installed here (located, not imported), else None; a tree that is not
    vLLM is a UserError naming what it lacks (judged against it, every hazard would pass). `check`: how to run
    `specguard check` over it, for the hazards that depend on a finding."""
    if path is not None:
        facts, given = _facts_of(SourceTree.open(path).root, check), f"--vllm-source {path}"
    else:
        installed = installed_vllm_dir()
        if installed is None:
            return None
        facts, given = _facts_of(SourceTree.open(installed).root, check), f"the installed vllm ({installed})"
    lacking = not_vllm(facts.tree)
    if lacking is not None:
        raise UserError(f"{given}: not a vLLM source tree: {lacking}")
    return facts


def _facts_of(root: Path, check: TreeChecker | None) -> SourceFacts:
    return _facts_for(root, modules_fingerprint(root), check)


@lru_cache(maxsize=4)
def _facts_for(root: Path, modules: str, check: TreeChecker | None) -> SourceFacts:
    # One SourceFacts per tree per process: a second config against the same source reuses its parses, unless a
    # module of the tree was edited, added or removed in between (`modules`: their paths, sizes and times).
    return SourceFacts(SourceTree(root), check)


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

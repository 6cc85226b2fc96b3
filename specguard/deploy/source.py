"""A small, read-only view of a vLLM source tree: modules, classes, class attributes, string literals.

Everything is read with libcst from the files; the analyzed vLLM is never imported or executed. Only the
handful of modules a hazard asks about are parsed, so a pre-flight stays cheap on a 3,000-file tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from specguard.errors import UserError


@dataclass(frozen=True)
class ClassInfo:
    """One class definition as written: where it is, its base expressions and class-level assignments."""

    name: str
    module: str
    path: Path
    bases: tuple[cst.BaseExpression, ...] = field(repr=False, compare=False)
    # Class-body assignments `x = v` / `x: T = v`, value as libcst node.
    attributes: dict[str, cst.BaseExpression] = field(repr=False, compare=False)
    node: cst.ClassDef = field(repr=False, compare=False)


@dataclass
class ParsedModule:
    name: str
    path: Path
    module: cst.Module
    classes: dict[str, ClassInfo]
    # Local name -> (module, name) for `from m import x as y`; relative imports resolved to absolute.
    imports: dict[str, tuple[str, str]]


def _dotted(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = _dotted(expr.value)
        return None if head is None else f"{head}.{expr.attr.value}"
    return None


def base_name(expr: cst.BaseExpression) -> str | None:
    """`Base`, `pkg.Base` or `Base[T]` -> the dotted name of the base class."""
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    return _dotted(expr)


class _Collector:
    """Top-level classes and `from x import y` of a module.

    Walks module-level statements only (and the blocks of top-level `if`/`try`, where vLLM puts TYPE_CHECKING
    and optional imports): a full CST visit of every function body costs more than the parse itself.
    """

    def __init__(self, module_name: str, path: Path, is_package: bool) -> None:
        self.module_name = module_name
        self.path = path
        self.is_package = is_package
        self.classes: dict[str, ClassInfo] = {}
        self.imports: dict[str, tuple[str, str]] = {}

    def collect(self, statements: Sequence[cst.CSTNode]) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.ClassDef):
                self._class(stmt)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.ImportFrom):
                        self._import_from(small)
            elif isinstance(stmt, cst.If):
                self.collect(stmt.body.body)
                orelse: Any = stmt.orelse
                while orelse is not None:
                    self.collect(orelse.body.body)
                    orelse = getattr(orelse, "orelse", None)
            elif isinstance(stmt, cst.Try):
                self.collect(stmt.body.body)
                for handler in stmt.handlers:
                    self.collect(handler.body.body)
                for block in (stmt.orelse, stmt.finalbody):
                    if block is not None:
                        self.collect(block.body.body)

    def _absolute(self, node: cst.ImportFrom) -> str | None:
        level = len(node.relative)
        mod = _dotted(node.module) if node.module is not None else ""
        if level == 0:
            return mod
        parts = self.module_name.split(".")
        if not self.is_package:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, mod] if mod else parts)

    def _import_from(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        source = self._absolute(node)
        if source is None:
            return
        for alias in node.names:
            name = _dotted(alias.name)
            if name is None:
                continue
            asname = alias.asname.name if alias.asname else None
            local = asname.value if isinstance(asname, cst.Name) else name
            self.imports[local] = (source, name)

    def _class(self, node: cst.ClassDef) -> None:
        attrs: dict[str, cst.BaseExpression] = {}
        for stmt in node.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and small.value is not None:
                    if isinstance(small.target, cst.Name):
                        attrs[small.target.value] = small.value
                elif isinstance(small, cst.Assign):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            attrs[target.target.value] = small.value
        self.classes[node.name.value] = ClassInfo(
            name=node.name.value,
            module=self.module_name,
            path=self.path,
            bases=tuple(arg.value for arg in node.bases),
            attributes=attrs,
            node=node,
        )


@dataclass
class SourceTree:
    """A `vllm/` package directory, read lazily module by module."""

    root: Path
    _cache: dict[str, ParsedModule | None] = field(default_factory=dict)
    _positions: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path) -> SourceTree:
        root = Path(path).expanduser()
        if root.is_dir() and root.name != "vllm" and (root / "vllm" / "__init__.py").is_file():
            root = root / "vllm"  # a site-packages or unpacked-wheel dir holding vllm/
        if not root.is_dir():
            raise UserError(f"--vllm-source {path}: not a directory")
        if not (root / "__init__.py").is_file() or root.name != "vllm":
            raise UserError(
                f"--vllm-source {path}: not a vllm package directory (expected a 'vllm/' dir with __init__.py)"
            )
        return cls(root.resolve())

    @property
    def package(self) -> str:
        return self.root.name

    def version(self) -> str | None:
        """The version the tree declares in vllm/_version.py (generated at build time), read as text."""
        parsed = self.module(f"{self.package}._version")
        if parsed is None:
            return None
        for stmt in parsed.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign) and isinstance(small.value, cst.SimpleString):
                        names = {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
                        if "__version__" in names:
                            return small.value.evaluated_value  # type: ignore[return-value]
        return None

    def file_of(self, module: str) -> tuple[Path, bool] | None:
        parts = module.split(".")
        if parts[0] != self.package:
            return None
        base = self.root.joinpath(*parts[1:])
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        return None

    def module(self, name: str) -> ParsedModule | None:
        if name in self._cache:
            return self._cache[name]
        found = self.file_of(name)
        parsed: ParsedModule | None = None
        if found is not None:
            path, is_pkg = found
            try:
                tree = cst.parse_module(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
                tree = None
            if tree is not None:
                collector = _Collector(name, path, is_pkg)
                collector.collect(tree.body)  # no position metadata here: it costs twice the parse
                parsed = ParsedModule(name, path, tree, collector.classes, collector.imports)
        self._cache[name] = parsed
        return parsed

    def positions(self, module: str) -> Any:
        """Position metadata of a parsed module, computed on first use (only a few modules ever need it)."""
        if module not in self._positions:
            parsed = self.module(module)
            if parsed is None:
                return None
            wrapper = MetadataWrapper(parsed.module, unsafe_skip_copy=True)
            self._positions[module] = wrapper.resolve(PositionProvider)
        return self._positions[module]

    def span(self, cls: ClassInfo) -> tuple[int, int]:
        """First and last line of a class definition."""
        pos = self.positions(cls.module)[cls.node]
        return pos.start.line, pos.end.line

    def module_for_path(self, relpath: str) -> ParsedModule | None:
        """`v1/attention/backends/mla/flashinfer_mla.py` (relative to the package dir) -> its module."""
        rel = Path(relpath)
        parts = list(rel.with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        return self.module(".".join([self.package, *parts]))

    def resolve_class(
        self, module: str, name: str, _seen: frozenset[tuple[str, str]] = frozenset()
    ) -> ClassInfo | None:
        """The definition of `name` as seen from `module`, following `from x import y` re-exports."""
        key = (module, name)
        if key in _seen:
            return None
        parsed = self.module(module)
        if parsed is None:
            return None
        if "." in name:  # `pkg.mod.Class` or `alias.Class`
            head, _, last = name.rpartition(".")
            target = parsed.imports.get(head, (head, ""))
            target_module = f"{target[0]}.{target[1]}" if target[1] else target[0]
            return self.resolve_class(target_module, last, _seen | {key})
        if name in parsed.classes:
            return parsed.classes[name]
        if name in parsed.imports:
            src_module, src_name = parsed.imports[name]
            # `from pkg import mod` then `mod.Class` is handled above; here the import names the class.
            return self.resolve_class(src_module, src_name, _seen | {key})
        return None

    def ancestors(self, cls: ClassInfo) -> list[ClassInfo]:
        """The class and its resolvable bases, depth first, each once (an approximation of the MRO)."""
        out: list[ClassInfo] = []
        seen: set[tuple[str, str]] = set()
        stack = [cls]
        while stack:
            current = stack.pop(0)
            key = (current.module, current.name)
            if key in seen:
                continue
            seen.add(key)
            out.append(current)
            for base in current.bases:
                name = base_name(base)
                if name is None:
                    continue
                resolved = self.resolve_class(current.module, name)
                if resolved is not None:
                    stack.append(resolved)
        return out

    def class_attribute(self, cls: ClassInfo, attr: str) -> tuple[cst.BaseExpression, ClassInfo] | None:
        """The value `attr` has on `cls`, inherited like Python would find it (nearest definition first)."""
        for klass in self.ancestors(cls):
            if attr in klass.attributes:
                return klass.attributes[attr], klass
        return None


def literal_strings(node: cst.CSTNode) -> list[str]:
    """Every string literal under `node`, with implicit concatenation joined (vLLM splits long messages)."""
    out: list[str] = []

    class _V(cst.CSTVisitor):
        def visit_ConcatenatedString(self, n: cst.ConcatenatedString) -> bool:
            parts: list[str] = []
            for piece in _flatten(n):
                if isinstance(piece, cst.SimpleString):
                    parts.append(str(piece.evaluated_value))
                else:  # f-string: keep the literal text, drop the holes
                    parts.append("".join(p.value for p in piece.parts if isinstance(p, cst.FormattedStringText)))
            out.append("".join(parts))
            return False

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            out.append(str(n.evaluated_value))

        def visit_FormattedString(self, n: cst.FormattedString) -> None:
            out.append("".join(p.value for p in n.parts if isinstance(p, cst.FormattedStringText)))

    node.visit(_V())
    return out


def _flatten(node: cst.ConcatenatedString) -> list[cst.SimpleString | cst.FormattedString]:
    pieces: list[cst.SimpleString | cst.FormattedString] = []
    for side in (node.left, node.right):
        if isinstance(side, cst.ConcatenatedString):
            pieces.extend(_flatten(side))
        else:
            pieces.append(side)
    return pieces


def literal_value(node: cst.BaseExpression) -> object:
    """True/False/None/int/str literals as Python values; anything else -> the node's source text."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return cst.Module(body=[]).code_for_node(node)

"""A small, read-only view of a vLLM source tree: modules, classes, functions, imports and string literals.

Everything is read from the files with the standard library's `ast`; the analyzed vLLM is never imported or
executed. Only the modules a pre-flight asks about are parsed (`ast` parses the ~40 config modules a pre-flight
may evaluate in a fraction of a second, where a concrete syntax tree would take seconds).
"""

from __future__ import annotations

import ast
import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard._files import SOURCE_CAP, UnreadableFile, read_regular
from specguard.errors import SourceError, UserError
from specguard.program.ast_tools import absolute_module, cached_on, dotted, walked
from specguard.program.discover import discover
from specguard.program.reading import decode, parse_shared

ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "Flag", "enum.Enum", "enum.IntEnum", "enum.StrEnum"}

# What one run reads of a served tree: its files' texts are kept for searching, so less than a check reads, and
# still far above any vLLM (0.33 holds 3,231 Python files, 50 MB of them; SGLang fewer). Read at each use so
# that a test can lower them in its own process; not a setting.
MAX_FILES = 25_000
MAX_BYTES = 256 << 20


class SourceLeftUnread(Exception):
    """Part of the served tree was not read (past its budget): what depends on all of it cannot be judged. The
    message says what was left."""


@dataclass(eq=False)
class ClassInfo:
    """One class definition as written: its bases, class-level assignments, annotated fields and methods."""

    name: str
    module: str
    path: Path
    node: ast.ClassDef = field(repr=False)
    # Class-body assignments `x = v` / `x: T = v`: name -> value expression.
    attributes: dict[str, ast.expr] = field(repr=False, default_factory=dict)
    # Class-body annotations `x: T` (with or without a value), in definition order: a dataclass's fields.
    annotations: dict[str, ast.expr] = field(repr=False, default_factory=dict)
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(repr=False, default_factory=dict)

    @property
    def bases(self) -> list[ast.expr]:
        return list(self.node.bases)

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClassInfo) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(eq=False)
class ParsedModule:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module = field(repr=False)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict, repr=False)
    # Module-level `NAME = value` (the last one wins, as at import time).
    assigns: dict[str, ast.expr] = field(default_factory=dict, repr=False)
    # Local name -> (module, name) for `from m import x as y`; relative imports resolved to absolute.
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Local name -> module for `import a.b as c` (and `import a.b` binds `a`).
    module_imports: dict[str, str] = field(default_factory=dict)
    # Modules named by `from m import *`, searched last.
    star_imports: list[str] = field(default_factory=list)
    # Names assigned only inside `if TYPE_CHECKING:` (they do not exist at run time).
    typing_only: set[str] = field(default_factory=set)
    # Names assigned more than once, one of them inside an `if` or `try` (`HAS_TRITON = find_spec(...)`, then
    # `HAS_TRITON = False` where a check fails): what import time leaves them is not known here.
    varies: set[str] = field(default_factory=set)


def rebound_globals(parsed: ParsedModule) -> frozenset[str]:
    """The module's names a function rebinds (`global _current` in `set_forward_context`): what a function reads
    there is whatever the last such call left, not the module's first value. Read once per module, where asked."""

    def read(tree: ast.AST) -> frozenset[str]:
        return frozenset(name for node in walked(tree) if isinstance(node, ast.Global) for name in node.names)

    return cached_on(parsed.tree, "rebound_globals", read)  # type: ignore[no-any-return]


def starts_as_none(parsed: ParsedModule, name: str) -> bool:
    """Whether the module's last top-level assignment of `name` is `name = None`."""
    start = parsed.assigns.get(name)
    return isinstance(start, ast.Constant) and start.value is None


def base_name(expr: ast.expr) -> str | None:
    """`Base`, `pkg.Base` or `Base[T]` -> the dotted name of the base class."""
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    return dotted(expr)


class _Collector:
    """Top-level classes, functions, assignments and imports of a module.

    Walks module-level statements only (and the blocks of top-level `if`/`try`, where vLLM puts TYPE_CHECKING
    and optional imports).
    """

    def __init__(self, parsed: ParsedModule) -> None:
        self.parsed = parsed
        self.conditional = 0  # inside a module-level `if` (not TYPE_CHECKING) or `try`
        self.assigned_where: dict[str, list[bool]] = {}  # name -> whether each assignment was conditional

    def _assign(self, name: str, value: ast.expr) -> None:
        self.parsed.assigns[name] = value
        where = self.assigned_where.setdefault(name, [])
        where.append(self.conditional > 0)
        if len(where) > 1 and any(where):
            self.parsed.varies.add(name)

    def collect(self, statements: list[ast.stmt]) -> None:
        for stmt in statements:
            if isinstance(stmt, ast.ClassDef):
                self._class(stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.parsed.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                self._import_from(stmt)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        self.parsed.module_imports[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        self.parsed.module_imports[head] = head
            elif isinstance(stmt, ast.Assign) and (record := functional_record(stmt)) is not None:
                self._class(record)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        self._assign(target.id, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
                self._assign(stmt.target.id, stmt.value)
            elif isinstance(stmt, ast.If):
                before = set(self.parsed.assigns)
                typing = (dotted(stmt.test) or "").rpartition(".")[2] == "TYPE_CHECKING"
                self.conditional += not typing
                self.collect(stmt.body)
                if typing:
                    self.parsed.typing_only |= set(self.parsed.assigns) - before
                self.collect(stmt.orelse)
                self.conditional -= not typing
            elif isinstance(stmt, ast.Try):
                self.conditional += 1
                self.collect(stmt.body)
                for handler in stmt.handlers:
                    self.collect(handler.body)
                self.collect(stmt.orelse)
                self.collect(stmt.finalbody)
                self.conditional -= 1

    def _import_from(self, node: ast.ImportFrom) -> None:
        source = absolute_module(self.parsed.name, self.parsed.is_package, node.level, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.parsed.star_imports.append(source)
                continue
            self.parsed.imports[alias.asname or alias.name] = (source, alias.name)

    def _class(self, node: ast.ClassDef) -> None:
        self.parsed.classes[node.name] = read_class(self.parsed, node)


_RECORD_FACTORIES = frozenset({"namedtuple", "NamedTuple"})


def functional_record(stmt: ast.Assign) -> ast.ClassDef | None:
    """`PlanRecord = namedtuple("PlanRecord", ["batch", "replan"])` (or `NamedTuple("R", [("batch", T), ...])`) read
    as the class it makes, `class PlanRecord(NamedTuple)` with those fields, at the assignment's place; None for any
    other assignment, or one whose fields are not written out."""
    call = stmt.value
    if not (
        len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(call, ast.Call)
        and (dotted(call.func) or "").rpartition(".")[2] in _RECORD_FACTORIES
        and len(call.args) == 2
    ):
        return None
    made_here: list[ast.AST] = []  # what is made here takes the assignment's place; a field's type keeps its own

    def here(node: ast.AST) -> Any:
        made_here.append(node)
        return node

    spec = call.args[1]
    fields: list[tuple[str, ast.expr]] = []
    if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
        fields = [(name, here(ast.Name("Any", ast.Load()))) for name in spec.value.replace(",", " ").split()]
    elif isinstance(spec, (ast.List, ast.Tuple)):
        for item in spec.elts:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                fields.append((item.value, here(ast.Name("Any", ast.Load()))))
            elif isinstance(item, ast.Tuple) and len(item.elts) == 2 and isinstance(item.elts[0], ast.Constant):
                fields.append((str(item.elts[0].value), item.elts[1]))
            else:
                return None
    else:
        return None
    body: list[ast.stmt] = [here(ast.AnnAssign(here(ast.Name(n, ast.Store())), t, None, 1)) for n, t in fields] or [
        here(ast.Pass())
    ]
    made = here(ast.ClassDef(stmt.targets[0].id, [here(ast.Name("NamedTuple", ast.Load()))], [], body, []))
    for node in made_here:
        ast.copy_location(node, stmt)
    return made


def read_module(name: str, path: Path, is_package: bool, tree: ast.Module) -> ParsedModule:
    """A parsed module's read model: its top-level classes, functions, assignments and imports."""
    parsed = ParsedModule(name, path, is_package, tree)
    _Collector(parsed).collect(tree.body)
    return parsed


def read_class(module: ParsedModule, node: ast.ClassDef) -> ClassInfo:
    """A class of `module` (top-level, or nested in a function or another class): its annotations, class-level
    values and methods."""
    info = ClassInfo(node.name, module.name, module.path, node)
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            info.annotations[stmt.target.id] = stmt.annotation
            if stmt.value is not None:
                info.attributes[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    info.attributes[target.id] = stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.methods[stmt.name] = stmt
    return info


@dataclass
class SourceTree:
    """A `vllm/` package directory, read lazily module by module."""

    root: Path
    _cache: dict[str, ParsedModule | None] = field(default_factory=dict)
    _texts: dict[Path, str] | None = None
    # Files that exist but could not be read or parsed (relative path -> why), for the notes of a judgement: a FIFO,
    # a link to a device, a file over the size cap, a syntax error, a module too deeply nested for Python's parser.
    unreadable: dict[str, str] = field(default_factory=dict)
    # Facts derived from the files that do not depend on a serving config (statements found by their text,
    # the callers of a function): computed once per tree.
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    # Why a search of the whole tree cannot be trusted (its walk or its reads ran past the budget), else None.
    left_unread: str | None = None
    bytes_read: int = 0
    # While one hazard is judged (`tracking_gaps`): the modules of the tree its evidence led to that could not be
    # read (missing, unreadable, a special file, a link out), module -> why. A hazard that found nothing while its
    # evidence had a gap was not judged: the gap may hold what it looks for.
    gaps: dict[str, str] | None = None
    # What `resolve` and `ancestors` found, asked again and again by every evaluation, kept while no gaps are tracked
    # (a hazard tracking them must meet each gap itself), each with the modules computing it read: those are read
    # again (`module`) wherever it is reused, so that what records the files a judgement depends on (the cache) sees
    # the same reads.
    _resolved: dict[tuple[str, str], tuple[object | None, frozenset[str]]] = field(default_factory=dict)
    _lineages: dict[int, tuple[tuple[ClassInfo, list[ClassInfo]], frozenset[str]]] = field(default_factory=dict)
    _reading: list[set[str]] = field(default_factory=list)  # per `_kept` computation under way: the modules read

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
        value = parsed.assigns.get("__version__")
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        return None

    def file_of(self, module: str) -> tuple[Path, bool] | None:
        parts = module.split(".")
        if parts[0] != self.package:
            return None
        base = self.root.joinpath(*parts[1:])
        # exists(), not is_file(): a FIFO or a link to a device named like a module is that module, unreadable.
        if (base / "__init__.py").exists():
            return base / "__init__.py", True
        if base.with_suffix(".py").exists():
            return base.with_suffix(".py"), False
        return None

    def module(self, name: str) -> ParsedModule | None:
        self._read_module(name)
        if name in self._cache:
            return self._cache[name]
        found = self.file_of(name)
        parsed: ParsedModule | None = None
        if found is not None:
            path, is_pkg = found
            text = self.text(path)
            tree = None
            if self.relpath(path) not in self.unreadable:
                try:  # what `specguard check` may parse of one file, refused as it refuses it
                    tree = parse_shared(text, str(path))
                except SourceError as exc:
                    self.unreadable[self.relpath(path)] = str(exc)
            if tree is not None:
                parsed = read_module(name, path, is_pkg, tree)
        self._cache[name] = parsed
        return parsed

    def text(self, path: Path) -> str:
        """A source file's text; "" for one that is not read (a FIFO, a device, too large, a link out of the tree,
        past the budget), noted in `unreadable` with the reason."""
        if self._texts is not None and path in self._texts:
            return self._texts[path]
        why = self._refusal(path)
        if why is not None:
            self.unreadable[self.relpath(path)] = why
            return ""
        return self._read(path)

    def _refusal(self, path: Path) -> str | None:
        """Why a file is not even opened: a file outside the tree, reached through a link (one that is not a regular
        file is refused by the reader before it opens it)."""
        real = os.path.realpath(path)
        if not (real + os.sep).startswith(str(self.root) + os.sep):
            return f"a link out of the served tree, to {real}; specguard reads only the files inside it"
        return None

    def _read(self, path: Path) -> str:
        """The text of a file of the tree, charged to the tree's budget."""
        if self.bytes_read > MAX_BYTES:
            self.left_unread = self.left_unread or _past_budget(f"{MAX_BYTES:,} bytes of Python", self.relpath(path))
            self.unreadable[self.relpath(path)] = f"past the {MAX_BYTES:,} bytes specguard reads of a served source"
            return ""
        try:
            data = read_regular(path, SOURCE_CAP)
            self.bytes_read += len(data)
            return decode(data)  # as `specguard check` decodes it: its coding cookie, else strict UTF-8
        except UnreadableFile as exc:
            self.unreadable[self.relpath(path)] = exc.reason
        except SourceError as exc:
            self.unreadable[self.relpath(path)] = str(exc)
        return ""

    def module_name(self, path: Path) -> str:
        try:
            rel = path.resolve().relative_to(self.root).with_suffix("")
        except ValueError:  # a link out of the tree keeps its own name (its module is then not read)
            rel = path.relative_to(self.root).with_suffix("")
        parts = list(rel.parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join([self.package, *parts])

    def relpath(self, path: Path) -> str:
        for candidate in (path.resolve(), path):  # a link out of the tree (to /dev/zero) keeps its own name
            try:
                return candidate.relative_to(self.root).as_posix()
            except ValueError:
                continue
        return str(path)

    def module_for_path(self, relpath: str) -> ParsedModule | None:
        """`v1/attention/backends/mla/flashinfer_mla.py` (relative to the package dir) -> its module; one that
        cannot be read is a gap in the evidence of the hazard being judged."""
        name = self.module_name(self.root / relpath)
        parsed = self.module(name)
        if parsed is None:
            self._note_gap(name)
        return parsed

    def files_containing(self, needle: str) -> list[Path]:
        """Every .py file of the tree whose text contains `needle` (all texts are read once, then kept). The walk
        does not leave the tree through a link; past the budget, raises `SourceLeftUnread`."""
        if self._texts is None:
            found = discover([self.root], (), self.root, respect_gitignore=False, limits=(MAX_FILES, MAX_BYTES))
            if found.stopped is not None:
                spent, first_left = found.stopped
                self.left_unread = _past_budget(spent, self.relpath(Path(first_left)))
            self._texts = {p: self._read(p) for p in sorted(Path(f) for f in found.files)}
        if self.left_unread is not None:
            raise SourceLeftUnread(self.left_unread)
        return [p for p, text in self._texts.items() if needle in text]

    def resolve(self, module: str, name: str, _seen: frozenset[tuple[str, str]] = frozenset()) -> object | None:
        """What `name` means in `module`: a ClassInfo, a (ParsedModule, FunctionDef), a module name (str) or
        a (ParsedModule, value expression) for a module-level assignment; re-exports are followed."""
        if _seen or self.gaps is not None:
            return self._resolve(module, name, _seen)
        return self._kept(self._resolved, (module, name), lambda: self._resolve(module, name, _seen))

    def _kept(self, kept: dict[Any, tuple[Any, frozenset[str]]], key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()`, kept in `kept` under `key`; the modules it read are read again each time it is reused."""
        if key in kept:
            found, read = kept[key]
            for name in read:
                self.module(name)
            return found
        reading: set[str] = set()
        self._reading.append(reading)
        try:
            found = compute()
        finally:
            self._reading.pop()
        for outer in self._reading:
            outer |= reading
        kept[key] = (found, frozenset(reading))
        return found

    def forget_resolved(self) -> None:
        """Drop what `resolve` and `ancestors` kept: a module was replaced by another reading of it."""
        self._resolved.clear()
        self._lineages.clear()

    def _read_module(self, name: str) -> None:
        """Note a module read for the `_kept` computations under way."""
        if self._reading:
            self._reading[-1].add(name)

    def _resolve(self, module: str, name: str, _seen: frozenset[tuple[str, str]]) -> object | None:
        key = (module, name)
        if key in _seen:
            return None
        seen = _seen | {key}
        parsed = self.module(module)
        if parsed is None:
            self._note_gap(module)
            # `from pkg import sub` where sub is a module.
            return module if self.file_of(module) is not None and not name else None
        if "." in name:
            head, _, last = name.partition(".")
            target = self.resolve(module, head, seen)
            while isinstance(target, str) and "." in last:
                nxt, _, last = last.partition(".")
                target = f"{target}.{nxt}"
            if isinstance(target, str):
                return self.resolve(target, last, seen)
            if isinstance(target, ClassInfo):
                return target  # nested attribute of a class: the class is as far as we go
            return None
        if name in parsed.classes:
            return parsed.classes[name]
        if name in parsed.functions:
            return (parsed, parsed.functions[name])
        if name in parsed.imports:
            src_module, src_name = parsed.imports[name]
            if self.file_of(f"{src_module}.{src_name}") is not None:
                return f"{src_module}.{src_name}"
            return self.resolve(src_module, src_name, seen)
        if name in parsed.module_imports:
            return parsed.module_imports[name]
        if name in parsed.assigns:
            value = parsed.assigns[name]
            if isinstance(value, (ast.Name, ast.Attribute)):
                alias = dotted(value)
                if alias is not None and alias != name:
                    return self.resolve(module, alias, seen) or (parsed, value)
            return (parsed, value)
        for star in parsed.star_imports:
            found = self.resolve(star, name, seen)
            if found is not None:
                return found
        return None

    def _note_gap(self, module: str) -> None:
        """Note, while tracking, a module of this tree that a name leads to and that could not be read."""
        if self.gaps is None or module.split(".")[0] != self.package or module in self.gaps:
            return
        found = self.file_of(module)
        if found is None:
            relpath = "/".join(module.split(".")[1:]) + ".py"
            self.gaps[module] = f"{relpath} is missing"
            return
        rel = self.relpath(found[0])
        if rel in self.unreadable:
            self.gaps[module] = f"{rel} cannot be read ({self.unreadable[rel]})"

    @contextlib.contextmanager
    def tracking_gaps(self) -> Iterator[dict[str, str]]:
        """Track the gaps met within the block (see `gaps`); yields them."""
        outer, self.gaps = self.gaps, {}
        try:
            yield self.gaps
        finally:
            self.gaps = outer

    def resolve_class(self, module: str, name: str) -> ClassInfo | None:
        found = self.resolve(module, name)
        return found if isinstance(found, ClassInfo) else None

    def ancestors(self, cls: ClassInfo) -> list[ClassInfo]:
        """The class and its resolvable bases, breadth first, each once (an approximation of the MRO)."""
        if self.gaps is not None:
            return self._ancestors(cls)
        return list(self._kept(self._lineages, id(cls), lambda: (cls, self._ancestors(cls)))[1])

    def _ancestors(self, cls: ClassInfo) -> list[ClassInfo]:
        out: list[ClassInfo] = []
        seen: set[tuple[str, str]] = set()
        queue = [cls]
        while queue:
            current = queue.pop(0)
            if current.key in seen:
                continue
            seen.add(current.key)
            out.append(current)
            for base in current.bases:
                name = base_name(base)
                if name is None:
                    continue
                resolved = self.resolve_class(current.module, name)
                if resolved is not None:
                    queue.append(resolved)
        return out

    def base_names(self, cls: ClassInfo) -> set[str]:
        """Dotted names of every base written in the class and its resolvable ancestors (`enum.Enum`, ...)."""
        names: set[str] = set()
        for klass in self.ancestors(cls):
            for base in klass.bases:
                name = base_name(base)
                if name is not None:
                    names.add(name)
                    names.add(name.rpartition(".")[2])
        return names

    def parents(self, module: ParsedModule) -> dict[int, ast.AST]:
        """id(node) -> its parent, for every node of a module (built once per module)."""
        key = ("parents", module.name)
        if key not in self.memo:
            self.memo[key] = {id(child): node for node in walked(module.tree) for child in ast.iter_child_nodes(node)}
        return self.memo[key]

    def is_enum(self, cls: ClassInfo) -> bool:
        return bool(self.base_names(cls) & ENUM_BASES)

    def enum_members(self, cls: ClassInfo) -> list[str]:
        return [n for n in cls.attributes if not n.startswith("_") and n not in cls.methods]

    def classes_in(self, annotation: ast.expr, module: str) -> list[ClassInfo]:
        """The classes an annotation names (`KVTransferConfig | None`, `"VllmConfig"`), in order."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return []
        out: list[ClassInfo] = []
        for node in walked(annotation):
            name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            found = self.resolve_class(module, name) if name else None
            if found is not None and found not in out:
                out.append(found)
        return out

    def field_enum(self, cls: ClassInfo, name: str) -> ClassInfo | None:
        """The Enum a dataclass field is annotated with (`cudagraph_mode: CUDAGraphMode | None`), if any."""
        for klass in self.ancestors(cls):
            if name in klass.annotations:
                return next(
                    (c for c in self.classes_in(klass.annotations[name], klass.module) if self.is_enum(c)), None
                )
        return None

    def functions(self, module: ParsedModule) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ClassInfo | None]]:
        """Every function of a module, nested ones too, with the class it belongs to (built once per module)."""
        key = ("functions", module.name)
        if key not in self.memo:
            out: list[tuple[Any, ClassInfo | None]] = []

            def visit(node: ast.AST, owner: ClassInfo | None) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out.append((child, owner))
                        visit(child, owner)
                    elif isinstance(child, ast.ClassDef):
                        info = module.classes.get(child.name)
                        visit(child, info if info is not None and info.node is child else owner)
                    else:
                        visit(child, owner)

            visit(module.tree, None)
            self.memo[key] = out
        return self.memo[key]

    def class_attribute(self, cls: ClassInfo, attr: str) -> tuple[ast.expr, ClassInfo] | None:
        """The value `attr` has on `cls`, inherited like Python would find it (nearest definition first)."""
        for klass in self.ancestors(cls):
            if attr in klass.attributes:
                return klass.attributes[attr], klass
        return None

    def method(self, cls: ClassInfo, name: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ClassInfo] | None:
        for klass in self.ancestors(cls):
            if name in klass.methods:
                return klass.methods[name], klass
        return None


def _past_budget(spent: str, first_left: str) -> str:
    return (
        f"the served source holds more than specguard reads of it ({spent}; the walk stopped at {first_left}), and "
        "this depends on all of it"
    )


def _string_pieces(node: ast.AST) -> list[tuple[int, int, str]]:
    """String literals under `node` with their positions; an f-string counts once, its holes as `{expr}`."""
    inside: set[int] = set()
    pieces: list[tuple[int, int, str]] = []
    for sub in walked(node):
        if isinstance(sub, ast.JoinedStr):
            inside.update(id(n) for v in sub.values for n in walked(v))
            text = "".join(
                v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
                for v in sub.values
            )
            pieces.append((sub.lineno, sub.col_offset, text))
    for sub in walked(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and id(sub) not in inside:
            pieces.append((sub.lineno, sub.col_offset, sub.value))
    return sorted(pieces)


def literal_strings(node: ast.AST) -> list[str]:
    """Every string literal under `node`, in source order (an f-string's holes read `{expr}`)."""
    return [text for _, _, text in _string_pieces(node)]


def message_of(node: ast.AST) -> str:
    """The text a raise, assert or warning says: its literals joined in source order (read once per node)."""
    return cached_on(node, "message", lambda n: "".join(literal_strings(n)))  # type: ignore[no-any-return]


def literal_value(node: ast.expr) -> object:
    """A literal as a Python value (ints, strings, tuples...); anything else -> its source text."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)

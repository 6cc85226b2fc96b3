"""The analyzed project as the evaluator reads it: modules parsed with `ast` on first use, found the way the
analysis engine finds them (the checked roots first, then the installed packages), never imported.

The read model of a module (classes, functions, imports, module-level assignments) and name resolution are the
served-source view's (`program.tree.SourceTree`); this subclass only changes where a module's file comes from,
keeps every parsed module for the whole run, and records which files an evaluation read, so that a cached
verdict is reused only while they are unchanged. A module's bytes come from a reader: in `specguard check`, the
run's own bytes of the file, the ones every other stage of the run uses.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from specguard.errors import SourceError
from specguard.program.modules import ModuleLocator
from specguard.program.reading import UNSTAMPED, decode, names_as_python_reads, parse_ast, read_stamped
from specguard.program.sparse import sparse_lines
from specguard.program.tree import ParsedModule, SourceTree, read_module

Stamp = tuple[int, int]
# A module's bytes and their (size, mtime_ns) stamp; None where they cannot be had (unreadable, changed since the
# run's other stages read them).
Reader = Callable[[Path], "tuple[bytes, Stamp] | None"]


def read_file(path: Path) -> tuple[bytes, Stamp] | None:
    """The file as it is now: the reader where no run holds the bytes (an in-memory check, a test)."""
    try:
        return read_stamped(path)
    except SourceError:
        return None


class Parsed:
    """Every module parsed in one run, by file, with the stamp it had when it was read."""

    def __init__(self, reader: Reader = read_file) -> None:
        self.by_path: dict[Path, tuple[ParsedModule | None, Stamp]] = {}
        self.texts: dict[Path, str] = {}
        self._raw: dict[Path, tuple[str, Stamp] | None] = {}
        self.reader = reader

    def module(self, name: str, path: Path, is_package: bool) -> tuple[ParsedModule | None, Stamp]:
        absolute = path.absolute()  # one parse per file, however its path was spelled
        if absolute not in self.by_path:
            try:
                if absolute in self.texts:
                    text, stamp = self.texts[absolute], UNSTAMPED
                else:
                    found = self.reader(path)
                    if found is None:
                        raise SourceError("unreadable")
                    data, stamp = found
                    text = decode(data)
                tree = parse_ast(text, str(absolute))
            except SourceError:
                self.by_path[absolute] = (None, UNSTAMPED)
            else:
                parsed = read_module(name, absolute, is_package, tree)
                # for preselections by reading, numbered as CPython numbers lines (a form feed ends none), with
                # names spelled as Python compares them (NFKC), as `tree` has them
                names = names_as_python_reads(text)
                parsed.lines = [line.rstrip("\r\n") for line in sparse_lines(names)]  # type: ignore[attr-defined]
                self.by_path[absolute] = (parsed, stamp)
        return self.by_path[absolute]

    def raw(self, path: Path) -> tuple[str, Stamp] | None:
        """A module's text and stamp, read once, unparsed (a preselection by reading needs no more)."""
        absolute = path.absolute()
        if absolute in self.texts:
            return self.texts[absolute], UNSTAMPED
        if absolute not in self._raw:
            found = self.reader(path)
            try:
                self._raw[absolute] = (decode(found[0]), found[1]) if found is not None else None
            except SourceError:
                self._raw[absolute] = None
        return self._raw[absolute]

    def add_text(self, path: Path, text: str) -> None:
        """A module whose text is known already (an in-memory example, a fix being re-checked)."""
        self.texts[path.absolute()] = text
        self.by_path.pop(path.absolute(), None)


class Program(SourceTree):
    """The project seen from one root (the folder holding a checked file's top package)."""

    def __init__(
        self,
        locator: ModuleLocator,
        root: Path,
        parsed: Parsed,
        stubs: dict[str, str] | None = None,
        readable: Callable[[str], bool] = lambda top: True,
    ) -> None:
        super().__init__(root)
        self.locator = locator
        self.readable = readable  # which installed top-level packages an evaluation may read (not torch, numpy)
        self.parsed = parsed
        self.stubs = stubs or {}  # module name -> source text standing in for a module nobody can locate
        self.read: dict[Path, Stamp] = {}  # every file read since the caller last cleared it, for the cache
        self._stamps: dict[str, tuple[Path, Stamp]] = {}

    @property
    def package(self) -> str:
        return ""  # every module the locator finds belongs to the program

    def file_of(self, module: str) -> tuple[Path, bool] | None:
        top = module.partition(".")[0]
        if not (self.locator.in_tree(top) or self.readable(top)):
            return None
        found = self.locator.find(module, self.root)
        if found is None:
            return None
        path = found[0]
        return path, path.name == "__init__.py"

    def module(self, name: str) -> ParsedModule | None:
        self._read_module(name)
        if name in self._cache:
            if name in self._stamps:
                path, stamp = self._stamps[name]
                self.read[path] = stamp
            return self._cache[name]
        found = self.file_of(name)
        parsed: ParsedModule | None = None
        if found is not None:
            parsed, stamp = self.parsed.module(name, *found)
            self._stamps[name] = (found[0], stamp)
            self.read[found[0]] = stamp
        elif name in self.stubs:
            tree = ast.parse(self.stubs[name], filename=f"<stub of {name}>")
            parsed = read_module(name, Path(f"<stub of {name}>"), False, tree)
        self._cache[name] = parsed
        return parsed

    def module_at(self, name: str, path: Path, text: str | None = None) -> ParsedModule | None:
        """The module in this file (with this text, when given) under this name, whatever the locator finds."""
        if text is not None:
            self.parsed.add_text(path, text)
        parsed, stamp = self.parsed.module(name, path, path.name == "__init__.py")
        if name in self._cache and self._cache[name] is not parsed:
            self.forget_resolved()  # names resolved into the module it replaces
        self._cache[name] = parsed
        self._stamps[name] = (path, stamp)
        self.read[path] = stamp
        return parsed

    def module_text(self, name: str) -> str | None:
        """A module's text, unparsed, its read noted for the cache as a parse's is."""
        found = self.file_of(name)
        raw = self.parsed.raw(found[0]) if found is not None else None
        if found is None or raw is None:
            return None
        self.read[found[0]] = raw[1]
        return raw[0]

    def relpath(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except (ValueError, OSError):
            return str(path)

    def text(self, path: Path) -> str:
        return self.parsed.texts.get(path, "")


def program_factory(
    locator: ModuleLocator, stubs: dict[str, str], readable: Callable[[str], bool], reader: Reader = read_file
) -> Callable[[Path], Program]:
    """Programs by root, sharing one parse of every module, read through `reader`. Of the installed packages, only
    those `readable` allows are read: the analyzed code's own (an out-of-tree plugin's vLLM), never every library
    it imports."""
    parsed = Parsed(reader)
    made: dict[Path, Program] = {}

    def program(root: Path) -> Program:
        if root not in made:
            made[root] = Program(locator, root, parsed, stubs, readable)
        return made[root]

    program.parsed = parsed  # type: ignore[attr-defined]
    return program

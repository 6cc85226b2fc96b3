"""Module names of files, and files of module names, without importing anything."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path


@cache
def _is_package_dir(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def module_name(path: Path) -> tuple[str, bool, Path]:
    """(dotted module name, is it a package __init__, the folder the top package lives in).

    A folder without __init__.py inside a regular package is a namespace portion of it (PEP 420): Python imports
    `sglang/multimodal_gen/runtime/x.py` as `sglang.multimodal_gen.runtime.x`, so the name runs up to the highest
    regular package above the file, through such folders."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    above = [path.parent, *path.parent.parents]
    packages = [i for i, folder in enumerate(above) if _is_package_dir(folder)]
    top = packages[-1] + 1 if packages else 0
    parts[:0] = [folder.name for folder in reversed(above[:top])]
    return ".".join(parts), path.name == "__init__.py", above[top]


def is_stdlib(top: str) -> bool:
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def installed_roots(top: str) -> list[Path]:
    """The folders holding the installed top-level package or module `top` (more than one for a namespace
    package), located the way `import` would find it but never imported; none for the standard library."""
    if not top.isidentifier() or is_stdlib(top):
        return []
    import importlib.util

    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finders run, nothing is imported
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).parent for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin and spec.origin.endswith(".py") else []


def _file_under(root: Path, module: str) -> Path | None:
    rel = Path(*module.split("."))
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


class ModuleLocator:
    """Finds the file of a module: among the analyzed files and next to them on disk, then installed.

    A module is known by (root, name): two script folders may each have a `speculator.py`. A lookup made from
    one root looks there first, then in the other analyzed roots (in a fixed order, so results never depend
    on the order of the paths given), then in the installed packages (located, not imported).
    """

    def __init__(self, installed: bool = True) -> None:
        self._use_installed = installed  # False: nothing but the analyzed files (an in-memory example)
        self._files: dict[tuple[Path, str], Path] = {}
        self._roots: set[Path] = set()
        self._found: dict[tuple[Path | None, str], tuple[Path, Path] | None] = {}
        self._installed: dict[str, list[Path]] = {}
        self._in_tree: dict[str, bool] = {}  # does an analyzed root hold this top-level package?

    def add(self, module: str, path: Path, root: Path) -> None:
        self._files.setdefault((root, module), path)
        self._roots.add(root)
        self._found.clear()
        self._in_tree.clear()

    def installed(self, top: str) -> list[Path]:
        if top not in self._installed:
            self._installed[top] = installed_roots(top) if self._use_installed else []
        return self._installed[top]

    def find(self, module: str, root: Path | None = None) -> tuple[Path, Path] | None:
        """(file, root) of `module` as seen from a module under `root`."""
        if not module:
            return None
        key = (root, module)
        if key not in self._found:
            self._found[key] = self._search(module, root)
        return self._found[key]

    def _search(self, module: str, root: Path | None) -> tuple[Path, Path] | None:
        for where in self._roots_for(module, root):
            path = self._files.get((where, module)) or _file_under(where, module)
            if path is not None:
                return path, where
        return None

    def in_tree(self, top: str) -> bool:
        """Whether an analyzed root holds this top-level package or module."""
        if top not in self._in_tree:
            self._in_tree[top] = any((r / top).is_dir() or (r / f"{top}.py").is_file() for r in self._roots)
        return self._in_tree[top]

    def _roots_for(self, module: str, root: Path | None) -> list[Path]:
        """Where to look: the analyzed roots, or the installed copy when no analyzed root holds the top package
        (an installed vLLM never stands in for a module missing from the vLLM tree being checked)."""
        top = module.partition(".")[0]
        if self.in_tree(top):
            return [*([root] if root is not None else []), *sorted(self._roots - {root}, key=str)]
        return self.installed(top)

    def is_module(self, module: str, root: Path | None = None) -> bool | None:
        """True for a module (a file, or a folder without __init__.py), False for a name inside a module
        that exists, None when neither it nor its parent can be found."""
        if self.find(module, root) is not None:
            return True
        rel = Path(*module.split("."))
        if any((r / rel).is_dir() for r in self._roots_for(module, root)):
            return True
        parent = module.rpartition(".")[0]
        return False if parent and self.is_module(parent, root) else None

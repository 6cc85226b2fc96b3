"""Module names of files, and files of module names, without importing anything."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def _is_package_dir(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def module_name(path: Path) -> tuple[str, bool, Path]:
    """(dotted module name, is it a package __init__, the folder the top package lives in)."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while _is_package_dir(folder):
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), path.name == "__init__.py", folder


class ModuleLocator:
    """Finds the file of a module among the analyzed files, or next to them on disk (outside the given paths)."""

    def __init__(self) -> None:
        self._files: dict[str, Path] = {}
        self._roots: set[Path] = set()

    def add(self, module: str, path: Path, root: Path) -> None:
        self._files.setdefault(module, path)
        self._roots.add(root)

    def find(self, module: str) -> Path | None:
        if module in self._files:
            return self._files[module]
        rel = Path(*module.split(".")) if module else None
        if rel is None:
            return None
        for root in self._roots:
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if candidate.is_file():
                    self._files[module] = candidate
                    return candidate
        return None

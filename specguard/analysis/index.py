"""The project index: answers "is this class a speculator?" and "what does this name refer to?" across files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.analysis.summary import ClassSummary, ModuleSummary
from specguard.file_facts import FileFacts
from specguard.program.modules import ModuleLocator, is_stdlib
from specguard.program.signatures import Signature

if TYPE_CHECKING:
    from specguard.packs import Pack


Place = tuple[ModuleSummary, str, Path]  # a name defined in a module, and the root that module lives under


@dataclass(frozen=True)
class Unresolved:
    """A base class whose module is neither under the checked paths nor installed."""

    base: str  # qualified, e.g. vllm.v1.worker.gpu.spec_decode.dflash.speculator.DFlashSpeculator
    subclass: str  # the class that names it, by its qualified name in its module
    path: Path | None  # the subclass's file and lines
    lines: tuple[int, int]
    imports: tuple[tuple[str, str], ...]  # of the subclass's module, to recognise aliases in its body


class ProjectIndex:
    """Module summaries by (root, module name), loaded on demand from the analyzed roots or installed packages."""

    def __init__(
        self,
        locator: ModuleLocator,
        load: Callable[[Path], ModuleSummary | None],
    ) -> None:
        self._locator = locator
        self._load = load
        self._summaries: dict[tuple[Path, str], ModuleSummary | None] = {}
        self.unresolved: dict[str, Unresolved] = {}  # by base: what `check` says once instead of guessing
        self._users: dict[Path, dict[str, list[tuple[str, str]]]] = {}  # by root: base -> classes naming it

    def add(self, summary: ModuleSummary, root: Path) -> None:
        self._summaries[(root, summary.module)] = summary

    def summary(self, module: str, root: Path) -> tuple[ModuleSummary, Path] | None:
        own = self._summaries.get((root, module))
        if own is not None:
            return own, root
        found = self._locator.find(module, root)
        if found is None:
            return None
        path, where = found
        if (where, module) not in self._summaries:
            self._summaries[(where, module)] = self._load(path)
        summary = self._summaries[(where, module)]
        return (summary, where) if summary is not None else None

    def _lookup(self, qualified: str, root: Path) -> Place | None:
        """Where a qualified name is defined, following re-exports and `from m import *` chains."""
        pending, seen = [(qualified, root)], set()
        while pending and len(seen) < 50:  # bounds re-export and star chains (and cycles)
            qualified, root = pending.pop(0)
            if (qualified, root) in seen:
                continue
            seen.add((qualified, root))
            module, _, name = qualified.rpartition(".")
            found = self.summary(module, root) if module else None
            if found is None:
                continue
            summary, where = found
            if name in summary.classes or name in summary.functions:
                return summary, name, where
            if name in summary.imports:
                pending.append((summary.imports[name], where))
            elif not name.startswith("_"):
                pending.extend((f"{star}.{name}", where) for star in summary.star_imports)
        return None

    def _base(self, summary: ModuleSummary, root: Path, base: str) -> tuple[str, Place | None]:
        """A base class expression resolved from its module: its qualified name and where it is defined."""
        qualified = summary.resolve(base)
        if qualified == base and summary.star_imports and base.partition(".")[0] not in summary.classes:
            for star in summary.star_imports:  # a name some `from m import *` brought in
                found = self._lookup(f"{star}.{base}", root)
                if found is not None:
                    return f"{found[0].module}.{found[1]}", found
        return qualified, self._lookup(qualified, root)

    def lineage(self, summary: ModuleSummary, root: Path, class_name: str) -> tuple[list[str], list[str]]:
        """Qualified names of every ancestor of a class, through any number of levels and modules, and those
        of the ancestors whose module could not be located (so their own ancestors are unknown)."""
        seen: list[str] = []
        missing: list[str] = []
        stack = [(summary, class_name, root)]
        visited: set[tuple[Path, str, str]] = set()
        while stack:
            mod, name, where = stack.pop()
            if (where, mod.module, name) in visited or name not in mod.classes:
                continue
            visited.add((where, mod.module, name))
            for base in mod.classes[name].bases:
                qualified, found = self._base(mod, where, base)
                seen.append(qualified)
                if found is not None:
                    stack.append(found)
                elif self._missing_module(qualified.rpartition(".")[0], where):
                    missing.append(qualified)
        return seen, missing

    def _missing_module(self, module: str, root: Path) -> bool:
        """A module a base class names that is neither under the checked paths nor installed (nor stdlib)."""
        if not module:
            return False  # a bare name: a builtin, or one a star import brought in
        state = self._locator.is_module(module, root)
        if state is None:
            return not is_stdlib(module.partition(".")[0])
        if state is True:
            return False
        parent, _, name = module.rpartition(".")  # a name inside a module: fine if that module defines it
        found = self.summary(parent, root)
        return found is not None and not any(name in d for d in (found[0].classes, found[0].imports))

    def mixed_into(self, summary: ModuleSummary, root: Path) -> tuple[tuple[str, str, str], ...]:
        """For each class of the module with no base (a mixin, maybe), the project's classes that name it as a base
        beside others, as (the class, their module, their class): a mixin's methods run on an instance of a class
        that mixes it in, which may live in any module of the project."""
        users = self._named_as_base(root)
        return tuple(
            (name, module, user)
            for name, cls in sorted(summary.classes.items())
            if not cls.bases and "." not in name
            for module, user in users.get(f"{summary.module}.{name}", ())
        )

    def _named_as_base(self, root: Path) -> dict[str, list[tuple[str, str]]]:
        """Every base the project's scanned modules name beside another (resolved through their imports only:
        nothing is loaded), with the classes that name it; built once, after the scan has indexed every module."""
        if root not in self._users:
            found: dict[str, list[tuple[str, str]]] = {}
            for (where, _), mod in self._summaries.items():
                if where == root and mod is not None:
                    for name, cls in mod.classes.items():
                        for base in cls.bases if len(cls.bases) > 1 else ():  # mixed in beside another base
                            found.setdefault(mod.resolve(base), []).append((mod.module, name))
            self._users[root] = found
        return self._users[root]

    def ancestors(self, summary: ModuleSummary, root: Path, class_name: str) -> list[str]:
        return self.lineage(summary, root, class_name)[0]

    def overridden(self, summary: ModuleSummary, root: Path, class_name: str, method: str) -> Signature | None:
        """The signature of the `method` that `super()` reaches from a class."""
        found = self._defined_above(summary, root, class_name, method)
        return found.signatures.get(method) if found is not None else None

    def _defined_above(self, summary: ModuleSummary, root: Path, class_name: str, method: str) -> ClassSummary | None:
        """The ancestor whose `method` `super()` reaches from a class: the first definition among its ancestors,
        each class's bases in order, depth first (Python's order for simple hierarchies)."""
        seen: set[tuple[Path, str, str]] = set()

        def above(mod: ModuleSummary, name: str, where: Path, depth: int) -> ClassSummary | None:
            if (where, mod.module, name) in seen or name not in mod.classes or depth > 50:
                return None
            seen.add((where, mod.module, name))
            for base in mod.classes[name].bases:
                found = self._base(mod, where, base)[1]
                if found is None:
                    continue
                base_summary, base_name, base_root = found
                cls = base_summary.classes[base_name]
                if method in cls.methods:
                    return cls
                inherited = above(base_summary, base_name, base_root, depth + 1)
                if inherited is not None:
                    return inherited
            return None

        return above(summary, class_name, root, 0)

    def _introduces(self, summary: ModuleSummary, root: Path, class_name: str, helpers: set[str]) -> bool:
        """A speculator that defines shared helpers where none of its ancestors defines any is where the helpers
        are defined (a fork's port of the base onto the abstract speculator): a base, whatever it is called. One
        below a base that has them (a legacy helper name kept by a subclass) is not."""
        own = summary.classes[class_name].methods & helpers
        return bool(own) and all(self._defined_above(summary, root, class_name, method) is None for method in helpers)

    def function_params(self, summary: ModuleSummary, root: Path, names: list[str]) -> list[tuple[str, ...]]:
        """Parameter lists of the functions with these names that the module imports or defines."""
        found = []
        for local, qualified in [*summary.imports.items(), *((n, f"{summary.module}.{n}") for n in summary.functions)]:
            if qualified.rpartition(".")[2] in names or local in names:
                target = self._lookup(qualified, root)
                if target is not None and target[1] in target[0].functions:
                    found.append(target[0].functions[target[1]])
        return found

    def _object_imports(self, summary: ModuleSummary, root: Path, owners: frozenset[str]) -> frozenset[str]:
        """Of the names that own a call (`x` in `x.f()`), those bound by `from m import x` where m is known and
        x is not a module: `x.f()` is then a method of some object, not the function `f`."""
        objects = set()
        for local in owners & summary.imports.keys():
            qualified = summary.imports[local]
            if local != qualified.partition(".")[0] and self._locator.is_module(qualified, root) is False:
                objects.add(local)
        return frozenset(objects)

    def _record_unresolved(self, base: str, summary: ModuleSummary, root: Path, name: str) -> None:
        if base not in self.unresolved:
            found = self._locator.find(summary.module, root)
            cls = summary.classes[name]
            self.unresolved[base] = Unresolved(
                base,
                name,
                found[0] if found else None,
                (cls.line, cls.end_line),
                tuple(sorted(summary.imports.items())),
            )

    def facts(
        self, summary: ModuleSummary, root: Path, pack: Pack, call_owners: frozenset[str] = frozenset()
    ) -> FileFacts:
        bases, spec_suffixes = pack.speculators.bases, tuple(pack.kv_groups.spec_class_suffixes)
        sink, dcp_param = pack.metadata.sink, pack.metadata.dcp_param

        def last(q: str) -> str:
            return q.rpartition(".")[2]

        helpers = set(pack.speculators.shared_helpers)
        speculators, spec_classes, base_classes = set(), set(), set()
        for name in summary.classes:
            ancestors, missing = self.lineage(summary, root, name)
            lineage = [last(a) for a in ancestors]
            if any(a in bases for a in lineage) or last(name) in bases:
                speculators.add(name)
                if last(name) in bases or (not missing and self._introduces(summary, root, name, helpers)):
                    base_classes.add(name)
            else:  # an ancestor we cannot read might have made it one
                for base in missing:
                    self._record_unresolved(base, summary, root, name)
            if any(n.endswith(spec_suffixes) for n in [last(name), *lineage]):
                spec_classes.add(name)
        overrides = [
            (cls, method)
            for cls in sorted(speculators - base_classes)
            for method in sorted(summary.classes[cls].methods & helpers)
        ]
        return FileFacts(
            module=summary.module,
            imports=tuple(sorted(summary.imports.items())),
            local_names=frozenset([*(c for c in summary.classes if "." not in c), *summary.functions]),
            speculator_classes=frozenset(speculators),
            base_classes=frozenset(base_classes),
            spec_classes=frozenset(spec_classes),
            sink_accepts_dcp=any(dcp_param in params for params in self.function_params(summary, root, sink)),
            object_imports=self._object_imports(summary, root, call_owners),
            helper_overrides=frozenset(f"{cls}.{method}" for cls, method in overrides),
            mixed_into=self.mixed_into(summary, root),
            overridden=tuple(
                (f"{cls}.{method}", found)
                for cls, method in overrides
                if (found := self.overridden(summary, root, cls, method)) is not None
            ),
        )

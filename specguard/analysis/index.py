"""The project index: answers "is this class a speculator?" and "what does this name refer to?" across files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from specguard.analysis.dataflow.values import FlowFacts, FunctionFlow
from specguard.analysis.modules import ModuleLocator
from specguard.analysis.summary import ModuleSummary
from specguard.packs import Pack


@dataclass(frozen=True)
class FileFacts:
    """What the rules of one file need to know about the rest of the project (and the cache key for it)."""

    module: str
    imports: tuple[tuple[str, str], ...]
    local_names: frozenset[str]
    speculator_classes: frozenset[str]
    base_classes: frozenset[str]  # the configured speculator bases defined in this file
    spec_classes: frozenset[str]  # KV-cache/attention spec classes defined in this file
    sink_accepts_dcp: bool
    flows: FlowFacts = FlowFacts()  # what the helpers its speculators call return, and their attributes hold

    @property
    def is_speculator_module(self) -> bool:
        return bool(self.speculator_classes)

    @cached_property
    def import_map(self) -> dict[str, str]:
        """`imports` as a lookup; rules ask for every call, so it is built once per file."""
        return dict(self.imports)

    def resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        if head in self.import_map:
            target = self.import_map[head]
        elif head in self.local_names:
            target = f"{self.module}.{head}" if self.module else head
        else:
            return dotted
        return f"{target}.{rest}" if rest else target


class ProjectIndex:
    def __init__(
        self,
        locator: ModuleLocator,
        load: Callable[[Path], ModuleSummary | None],
        load_flows: Callable[[ModuleSummary], dict[str, FunctionFlow | None]] | None = None,
    ) -> None:
        self._locator = locator
        self._load = load
        self._load_flows = load_flows
        self._summaries: dict[str, ModuleSummary | None] = {}

    def flows(self, summary: ModuleSummary) -> dict[str, FunctionFlow | None]:
        """The dataflow summaries of a module's functions, computed on first use (see analysis/dataflow)."""
        if summary.flows is None:
            summary.flows = self._load_flows(summary) if self._load_flows is not None else {}
        return summary.flows or {}

    def add(self, summary: ModuleSummary) -> None:
        self._summaries[summary.module] = summary

    def summary(self, module: str) -> ModuleSummary | None:
        if module not in self._summaries:
            path = self._locator.find(module)
            self._summaries[module] = self._load(path) if path else None
        return self._summaries[module]

    def _lookup(self, qualified: str) -> tuple[ModuleSummary, str] | None:
        """The module summary and name that a qualified name denotes, following re-exports."""
        for _ in range(20):  # bound re-export chains
            module, _, name = qualified.rpartition(".")
            summary = self.summary(module) if module else None
            if summary is None:
                return None
            if name in summary.classes or name in summary.functions:
                return summary, name
            if name not in summary.imports:
                return None
            qualified = summary.imports[name]
        return None

    def lookup(self, qualified: str) -> tuple[ModuleSummary, str] | None:
        return self._lookup(qualified)

    def lineage(self, summary: ModuleSummary, class_name: str) -> list[tuple[ModuleSummary, str]]:
        """The class, then its ancestors found in the project, nearest first (Python's order for simple
        hierarchies): where `self.method` is looked up."""
        order: list[tuple[ModuleSummary, str]] = []
        seen: set[tuple[str, str]] = set()

        def visit(mod: ModuleSummary, name: str, depth: int) -> None:
            if (mod.module, name) in seen or name not in mod.classes or depth > 50:
                return
            seen.add((mod.module, name))
            order.append((mod, name))
            for base in mod.classes[name].bases:
                found = self._lookup(mod.resolve(base))
                if found is not None:
                    visit(*found, depth + 1)

        visit(summary, class_name, 0)
        return order

    def ancestors(self, summary: ModuleSummary, class_name: str) -> list[str]:
        """Qualified names of every ancestor of a class, through any number of levels and modules."""
        seen: list[str] = []
        stack = [(summary, class_name)]
        visited: set[tuple[str, str]] = set()
        while stack:
            mod, name = stack.pop()
            if (mod.module, name) in visited or name not in mod.classes:
                continue
            visited.add((mod.module, name))
            for base in mod.classes[name].bases:
                qualified = mod.resolve(base)
                seen.append(qualified)
                found = self._lookup(qualified)
                if found is not None:
                    stack.append(found)
        return seen

    def function_params(self, summary: ModuleSummary, names: list[str]) -> list[tuple[str, ...]]:
        """Parameter lists of the functions with these names that the module imports or defines."""
        found = []
        for local, qualified in [*summary.imports.items(), *((n, f"{summary.module}.{n}") for n in summary.functions)]:
            if qualified.rpartition(".")[2] in names or local in names:
                target = self._lookup(qualified)
                if target is not None and target[1] in target[0].functions:
                    found.append(target[0].functions[target[1]])
        return found

    def facts(self, summary: ModuleSummary, pack: Pack) -> FileFacts:
        bases, spec_suffixes = pack.speculators.bases, tuple(pack.kv_groups.spec_class_suffixes)
        sink, dcp_param = pack.metadata.sink, pack.metadata.dcp_param

        def last(q: str) -> str:
            return q.rpartition(".")[2]

        speculators, spec_classes = set(), set()
        for name in summary.classes:
            lineage = [last(a) for a in self.ancestors(summary, name)]
            if any(a in bases for a in lineage) or name in bases:
                speculators.add(name)
            if any(n.endswith(spec_suffixes) for n in [name, *lineage]):
                spec_classes.add(name)
        flows = FlowFacts()
        if speculators:  # SG103 follows values only in speculator modules
            from specguard.analysis.dataflow.resolve import FlowResolver

            flows = FlowResolver(self, pack.padding_flow).file_flows(summary, speculators)
        return FileFacts(
            module=summary.module,
            imports=tuple(sorted(summary.imports.items())),
            local_names=frozenset([*summary.classes, *summary.functions]),
            speculator_classes=frozenset(speculators),
            base_classes=frozenset(n for n in summary.classes if n in bases),
            spec_classes=frozenset(spec_classes),
            sink_accepts_dcp=any(dcp_param in params for params in self.function_params(summary, sink)),
            flows=flows,
        )

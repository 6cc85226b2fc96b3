"""Stage two's first half, in the main process (and, on a cold run with workers, in one forked beside it): the
rules on the evaluator (a `judge` in their `Rule`) judge each candidate file with the whole project in view, and
their judgements join the file's facts for its worker.

Evaluation is lazy (only the functions a rule asks about, and what they reach) and cached per file: a file's
judgements are reused while its content, its facts and every file the evaluation read are unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.analysis.cache import Cache, JudgedFile
from specguard.analysis.handed import RuleSet
from specguard.file_facts import FileFacts
from specguard.findings import Judgement
from specguard.program.modules import ModuleLocator

if TYPE_CHECKING:
    from specguard.evaluation.program import Program, Reader
    from specguard.packs import Pack
    from specguard.rules.base import Rule


def mode_enum_stub(pack: Pack) -> dict[str, str]:
    """Source text standing in for the pack's mode enum where the analyzed project does not have it: an enum of
    the runtime modes the pack names, and nothing else (no predicate methods)."""
    pad = pack.padding
    if not pad.mode_enum or not pad.runtime_modes:
        return {}
    module, _, name = pad.mode_enum.rpartition(".")
    if not (module and name.isidentifier() and all(m.isidentifier() for m in pad.runtime_modes)):
        return {}
    members = "".join(f"    {member} = {index}\n" for index, member in enumerate(pad.runtime_modes))
    return {module: f"import enum\n\n\nclass {name}(enum.Enum):\n{members}"}


@dataclasses.dataclass(frozen=True)
class Judged:
    """A file's facts with its judgements, the cache entry to keep for them (none for a failed rule or an unsaved
    text), and the internal errors judging it met."""

    facts: FileFacts
    entry: JudgedFile | None
    errors: list[str]


class Judge:
    """Judges candidate files. A warm run takes every judgement from the cache: it imports neither the rules on the
    evaluator nor the evaluator, which load the first time a file must be judged."""

    def __init__(
        self,
        locator: ModuleLocator,
        pack: Pack,
        rules: RuleSet,
        codes: frozenset[str],
        cache: Cache,
        borrowed: Callable[[], set[str]],
        reader: Reader | None = None,
    ) -> None:
        self.pack, self.cache, self.handed = pack, cache, rules
        self.codes = sorted(codes & rules.judged)
        self._locator, self._borrowed, self._reader = locator, borrowed, reader
        self._rules: list[Rule] | None = None
        self._programs: Callable[[Path], Program] | None = None
        self.errors: list[str] = []

    def facts(
        self, path: str, root: Path, facts: FileFacts, mentions: frozenset[str], digest: str, text: str | None = None
    ) -> FileFacts:
        """The file's facts with its judgements. `text`: the file's text when it is not (yet) on disk as checked."""
        if not self.codes:
            return facts
        if text is None and (known := self.cached(path, facts, digest)) is not None:
            return known
        return self.keep(path, self.judged(path, root, facts, mentions, digest, text))

    def judged(
        self, path: str, root: Path, facts: FileFacts, mentions: frozenset[str], digest: str, text: str | None = None
    ) -> Judged:
        """The file judged, with nothing recorded in this process (so that another process may compute it)."""
        before = len(self.errors)
        found, deps, failed = self._judge(path, root, facts, mentions, text)
        errors = self.errors[before:]
        del self.errors[before:]  # kept by `keep`, in the process that records
        entry = JudgedFile(_key(digest, facts, self.codes), deps, found) if text is None and not failed else None
        return Judged(dataclasses.replace(facts, judgements=found), entry, errors)

    def keep(self, path: str, judged: Judged) -> FileFacts:
        """Record what `judged` computed (in this process or another): its cache entry and its errors."""
        if judged.entry is not None:
            self.cache.put_judged(path, judged.entry)
        self.errors.extend(judged.errors)
        return judged.facts

    def cached(self, path: str, facts: FileFacts, digest: str) -> FileFacts | None:
        """The file's facts with its judgements when the cache has them (for every file the evaluation read
        unchanged), else None: then `facts` computes them."""
        if not self.codes:
            return facts
        # Whether a rule applies is a function of what the key holds (the content, the facts, the pack).
        key = _key(digest, facts, self.codes)
        cached = self.cache.judgements.get(path)
        if cached is not None and cached.key == key and _unchanged(cached.deps):
            return dataclasses.replace(facts, judgements=cached.judgements)
        return None

    def _judge(
        self, path: str, root: Path, facts: FileFacts, mentions: frozenset[str], text: str | None
    ) -> tuple[tuple[Judgement, ...], tuple[tuple[str, int, int], ...], bool]:
        """(the judgements, the files the evaluation read with their stamps, whether a rule failed)."""
        rules = [rule for rule in self.load() if (rule.judges or rule.applies)(facts, self.pack, mentions)]
        if not rules:
            return (), (), False
        program = self._program(root)
        program.read.clear()
        module = program.module_at(facts.module, Path(path), text)
        if module is None:
            return (), (), False
        question = self.handed.question(path, module, facts, self.pack, program)
        judgements: list[Judgement] = []
        failed = False
        for rule in rules:
            try:
                judgements.extend(rule.judge(question))  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - a bug of ours in one file must not lose the others' findings
                failed = True
                self.errors.append(
                    f"{path}: internal error while evaluating ({rule.code}): {type(exc).__name__}: {exc} "
                    "(please report it)"
                )
        deps = tuple(sorted((str(p), *stamp) for p, stamp in program.read.items()))
        return tuple(sorted(judgements)), deps, failed

    def load(self) -> list[Rule]:
        """The rules on the evaluator, imported (and the evaluator with them) the first time they are needed."""
        if self._rules is None:
            self._rules = [self.handed.load(code) for code in self.codes]
        return self._rules

    def _program(self, root: Path) -> Program:
        if self._programs is None:
            from specguard.evaluation.program import program_factory, read_file

            pack_top = (self.pack.padding.mode_enum or "").partition(".")[0]
            readable = lambda top: top == pack_top or top in self._borrowed()  # noqa: E731
            reader = self._reader or read_file
            self._programs = program_factory(self._locator, mode_enum_stub(self.pack), readable, reader)
        return self._programs(root)


def _key(digest: str, facts: FileFacts, codes: list[str]) -> str:
    values = {f.name: getattr(facts, f.name) for f in dataclasses.fields(facts) if f.name != "judgements"}
    stable = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in values.items()}
    text = repr((digest, sorted(stable.items()), codes))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _unchanged(deps: tuple[tuple[str, int, int], ...]) -> bool:
    for path, size, mtime in deps:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True

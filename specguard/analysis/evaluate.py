"""Stage two, per candidate file: parse with libcst (where a rule walks its tree) and run the enabled rules.

The rules on the evaluator only report the judgements the main process made: a file with nothing else to check
is not parsed again, nor is libcst imported for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specguard.analysis.handed import RuleSet
from specguard.errors import SourceError
from specguard.file_facts import FileFacts
from specguard.findings import Finding, source_error
from specguard.fix_model import fix_of
from specguard.program.reading import decode
from specguard.program.sparse import sparse_source

if TYPE_CHECKING:
    from specguard.packs import Pack
    from specguard.rules.base import Diagnostic, Rule


def _names_to_keep(facts: FileFacts, pack: Pack) -> tuple[str, ...]:
    """The pack's names and the local aliases they were imported under (`bam` for build_attn_metadata)."""
    names = {n.decode() for n in pack.needles}
    aliases = {local for local, target in facts.imports if target.rpartition(".")[2] in names}
    return tuple(sorted(names | aliases))


def evaluate_source(
    text: str,
    path: str,
    facts: FileFacts,
    pack: Pack,
    handed: RuleSet,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> list[Finding]:
    rules = _reporting(handed, codes, facts, pack, mentions)
    if not rules:
        return []  # no rule can match here: the file is never parsed with libcst
    judged = frozenset(j.span[0] for j in facts.judgements)
    parsed = sparse_source(text, definitions, _names_to_keep(facts, pack), judged)
    if any(j.decided for j in facts.judgements):  # what the evaluation decided, fixed by text edits on `ast`
        ctx = handed.context(None, facts, pack, mentions, parsed, source=text)
        found = [(rule.code, d) for rule in rules for d in rule.check(ctx)]
        places = [ctx.span(d.span) for _, d in found if d.span is not None]
        fixes = [fix_of(d.fix.applicability, d.fix.message, d.fix.edits) if d.fix else None for _, d in found]
        return _findings(path, found, places, fixes)
    import libcst as cst

    from specguard.fixes.from_cst import checked_fix
    from specguard.program.positions import spans

    try:
        module = cst.parse_module(parsed)
        ctx = handed.context(module, facts, pack, mentions, parsed, source=text)
        found = [(rule.code, d) for rule in rules for d in rule.check(ctx)]
        nodes = [diag.node for _, diag in found if diag.node is not None]
        located = iter(spans(module, nodes) if nodes else [])
        places = [ctx.span(diag.span) if diag.span is not None else next(located) for _, diag in found]
        fixes = [checked_fix(module, diag.fix, text, parsed, ctx.holders) if diag.fix else None for _, diag in found]
    except cst.ParserSyntaxError as exc:
        return [source_error(path, f"syntax error (libcst): {exc.message}", exc.raw_line)]
    except RecursionError:  # libcst's and the rules' tree walks are recursive; CPython's parser let it through
        return [source_error(path, "cannot analyze: expression nesting too deep")]
    return _findings(path, found, places, fixes)


def _findings(
    path: str, found: list[tuple[str, Diagnostic]], places: list[tuple[int, int, int, int]], fixes: list
) -> list[Finding]:
    return [
        Finding(path, line, col, code, diag.message, end_line, end_col, diag.symbol, fix)
        for (code, diag), (line, col, end_line, end_col), fix in zip(found, places, fixes, strict=True)
    ]


def _rules(handed: RuleSet, codes: frozenset[str]) -> list[Rule]:
    return [handed.load(code) for code in sorted(codes)]


def _reporting(
    handed: RuleSet, codes: frozenset[str], facts: FileFacts, pack: Pack, mentions: frozenset[str]
) -> list[Rule]:
    """The rules that report in a job. Facts holding decided judgements make the evaluator's job: each rule
    reports what it decided. Facts without make libcst's: the rules on libcst that apply (a rule judged too
    reports there what is written in the function)."""
    judged = {j.code for j in facts.judgements if j.decided}
    if judged:
        return [r for r in _rules(handed, codes) if r.code in judged]
    return [r for r in _rules(handed, codes) if r.code not in handed.evaluated and r.applies(facts, pack, mentions)]


def evaluate_file(
    path: str,
    data: bytes,
    facts: FileFacts,
    pack: Pack,
    handed: RuleSet,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> list[Finding]:
    """Stage two for a file, on the bytes stage one read (never read again: the file may have changed since)."""
    if not _reporting(handed, codes, facts, pack, mentions):
        return []  # decided before decoding the file again
    try:
        text = decode(data)
    except SourceError as exc:
        return [source_error(path, str(exc))]
    return evaluate_source(text, path, facts, pack, handed, codes, mentions, definitions)

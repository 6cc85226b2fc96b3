"""SG201 group-flag-any-merge: a KV-cache group's causality flag is merged with any()/all()."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.analysis.cst_edits import enclosing_statement
from specguard.analysis.cst_tools import classes, has_decorator, kids, last_name, parameters
from specguard.rules.base import Diagnostic, NodeFix, Rule, RuleContext


def _any_all(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call) and last_name(node.func) in ("any", "all"):
        return last_name(node.func)
    return None


def _flag_merges(node: cst.CSTNode, flags: list[str]) -> Iterator[tuple[str, str, cst.CSTNode]]:
    """(flag, any|all, node) for `flag=any(...)` arguments and `flag = any(...)` assignments."""
    if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value in flags:
        if (fn := _any_all(node.value)) is not None:
            yield node.keyword.value, fn, node
    elif isinstance(node, cst.Assign) and (fn := _any_all(node.value)) is not None:
        for target in node.targets:
            name = last_name(target.target)
            if name in flags:
                yield name, fn, node
    for child in kids(node):
        yield from _flag_merges(child, flags)


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    groups = ctx.pack.kv_groups
    for cls in classes(ctx.module):
        if cls.name.value not in ctx.facts.spec_classes or not isinstance(cls.body, cst.IndentedBlock):
            continue
        for item in cls.body.body:
            if not (isinstance(item, cst.FunctionDef) and item.name.value in groups.merge_methods):
                continue
            if not has_decorator(item, "classmethod"):
                continue
            for flag, fn, node in _flag_merges(item, groups.flags):
                reduction = node.value  # type: ignore[attr-defined]
                yield Diagnostic(
                    node,
                    f"`{cls.name.value}.{item.name.value}` merges the per-layer flag `{flag}` with `{fn}()`; "
                    f"a KV-cache group must not mix causal and non-causal layers: require every spec to agree "
                    f"(e.g. a set of the values with exactly one element)",
                    f"{cls.name.value}.{item.name.value}",
                    agreement_fix(item, flag, reduction),
                )


def agreement_fix(method: cst.FunctionDef, flag: str, reduction: cst.Call) -> NodeFix | None:
    """Replace `any(<per-spec values>)` by an agreement check: collect the values in a set before the statement
    that held the reduction, raise ValueError naming the class and the flag unless there is exactly one, and
    pass that one value. What upstream's DCP fix did, with an error that survives `python -O`."""
    statement = enclosing_statement(method, reduction)
    if statement is None or len(reduction.args) != 1 or reduction.args[0].keyword or reduction.args[0].star:
        return None
    owner = parameters(method)[0].name.value if parameters(method) else None
    if owner is None:
        return None
    taken = {n.value for n in _names(method)}
    values = next(v for v in (f"{flag}_values{i or ''}" for i in range(100)) if v not in taken)
    spread = reduction.args[0].value
    if isinstance(spread, (cst.GeneratorExp, cst.ListComp, cst.SetComp)):
        collected: cst.BaseExpression = cst.SetComp(spread.elt, spread.for_in)
    else:
        collected = cst.Call(cst.Name("set"), [cst.Arg(spread)])
    collect = cst.SimpleStatementLine(
        [cst.Assign([cst.AssignTarget(cst.Name(values))], collected)], leading_lines=statement.leading_lines
    )
    check = cst.parse_statement(
        f"if len({values}) != 1:\n"
        f"    raise ValueError(\n"
        f'        f"{{{owner}.__name__}}: the layers of one KV cache group disagree on "\n'
        f'        f"{flag}: {{sorted({values})}}"\n'
        f"    )\n"
    )
    merged = statement.deep_replace(reduction, cst.parse_expression(f"{values}.pop()"))
    return NodeFix(
        "safe",
        f"Require every spec to agree on `{flag}`: raise ValueError when they differ, pass the one value",
        ((statement, cst.FlattenSentinel([collect, check, merged.with_changes(leading_lines=())])),),
    )


def _names(node: cst.CSTNode) -> Iterator[cst.Name]:
    if isinstance(node, cst.Name):
        yield node
    for kid in kids(node):
        yield from _names(kid)


def _spec_class_with_flag(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return bool(facts.spec_classes) and any(flag in mentions for flag in pack.kv_groups.flags)


RULE = Rule(
    code="SG201",
    name="group-flag-any-merge",
    title="KV-cache group causality flag merged with any()/all()",
    summary=(
        "Flags a `merge` classmethod of a KV-cache/attention spec class that combines a boolean per-layer "
        "causality flag (`non_causal_multi_token_decode`, or another flag the pack lists) with `any(...)` or "
        "`all(...)` over the specs instead of requiring all specs of the group to agree."
    ),
    why=(
        "A KV-cache group shares one attention-metadata build. With `any()`, one non-causal draft layer turns "
        "the whole group, causal target layers included, non-causal (and `all()` does the reverse): the target "
        "then attends without its causal mask. vLLM's DCP fix made the merge assert a single value; the rule "
        "keeps that from regressing."
    ),
    bad="""
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                return cls(
                    non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
                )
    """,
    good="""
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flags = {s.non_causal_multi_token_decode for s in specs}
                assert len(flags) == 1, "layers of one KV cache group must agree on causality"
                return cls(non_causal_multi_token_decode=flags.pop())
    """,
    check=check,
    applies=_spec_class_with_flag,
    fix_availability="sometimes",
    fix_summary=(
        "Safe: the reduction becomes an agreement check, the shape of upstream's DCP fix. The values are "
        "collected in a set just before the statement that merged them, a `ValueError` naming the class and the "
        "flag is raised unless there is exactly one, and that one value is passed on; a group that agrees merges "
        "exactly as before. Offered when the reduction has one argument and sits directly in the merge method "
        "(not inside a lambda or comprehension, whose names the check could not see)."
    ),
    fixed="""
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                non_causal_multi_token_decode_values = {s.non_causal_multi_token_decode for s in specs}
                if len(non_causal_multi_token_decode_values) != 1:
                    raise ValueError(
                        f"{cls.__name__}: the layers of one KV cache group disagree on "
                        f"non_causal_multi_token_decode: {sorted(non_causal_multi_token_decode_values)}"
                    )
                return cls(
                    non_causal_multi_token_decode=non_causal_multi_token_decode_values.pop(),
                )
    """,
)

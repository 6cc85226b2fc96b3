"""SG201 group-flag-any-merge: a KV-cache group's per-layer causality flag is merged by a reduction."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any, NamedTuple

from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import State, doubts
from specguard.evaluation.values import UNKNOWN, ClassRef, Label, Obj, Tagged, labels_of, plain
from specguard.evaluation.values import nearest as nearest_label
from specguard.findings import Judgement
from specguard.fix_model import NodeFix, NoFix
from specguard.fixes.agreement import AGREEING as AGREEING_REDUCTIONS
from specguard.fixes.agreement import agreement_fix
from specguard.fixes.ast_edits import indent_unit
from specguard.fixes.layout import Layout
from specguard.program.ast_tools import has_decorator, span, walked
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext
from specguard.rules.judging import MAX_DEPTH, OutOfBudget, Question, Scope

FLAG, REDUCED = "flag", "reduced"  # label kinds: a layer's flag, a reduction over flags (for the fix)
DISAGREEING = ((True, False), (False, True))
AGREEING = ((True, True), (False, False))

# What a merged flag means for a group whose layers disagree, in words.
_UNION = "a union: the group carries its most permissive layer's flag (True if any layer sets it)"
_MEET = "an intersection: the group carries its least permissive layer's flag (True only if every layer sets it)"
_OTHER = "a value that does not describe every layer"


class _Reduction(NamedTuple):
    """The reduction that computed the merged flag, as the fix reads it."""

    span: tuple[int, int, int, int]
    source: str  # the reduction's name: any, all, max, min, sum, reduce
    how: str = ""  # the locals it went through


class _Layers(Hooks):
    """A merge evaluated on a concrete group: the layers' flags are the subject, and a reduction over them is
    remembered (the fix replaces it)."""

    subjects = frozenset({FLAG})
    traced = frozenset({REDUCED})
    unresolved_may_raise = True  # a check the evaluation cannot read may be the one that fails a mixed group

    def __init__(self, path: str) -> None:
        self.path = path

    def reduced(self, ev: Any, name: str, inputs: list[Any], node: ast.AST | None) -> frozenset[Label]:
        if node is None or not any(x.kind == FLAG for v in inputs for x in labels_of(v)):
            return frozenset()
        return frozenset({Label(REDUCED, name, span(node), self.path)})


def _flag_of(q: Question, scope: Scope, flags: list[str]) -> list[str]:
    """The pack's flags this merge is about: named in its body, or declared by its class or an ancestor."""
    assert scope.cls is not None
    declared = {name for klass in q.program.ancestors(scope.cls) for name in klass.annotations}
    return [flag for flag in flags if flag in declared or scope.mentions({flag})]


def _run(q: Question, scope: Scope, flag: str, group: tuple[bool, ...]) -> list[tuple[State, Any, Any]] | None:
    """merge(group): (end state, returned value, the merged flag) for every path that returns; None: not decided."""
    assert scope.cls is not None
    ev = q.evaluator(_Layers(q.path))
    label = frozenset({Label(FLAG, flag)})
    specs = [Obj(scope.cls, {flag: Tagged(value, label)}, label="spec") for value in group]
    params = [p.arg for p in (*scope.node.args.posonlyargs, *scope.node.args.args, *scope.node.args.kwonlyargs)]
    bindings: dict[str, Any] = dict.fromkeys(params, UNKNOWN)
    if params:
        bindings[params[0]] = ClassRef(scope.cls)
    if len(params) > 1:
        bindings[params[1]] = specs
    try:
        flow = ev.run(scope.function, bindings)
    except (OutOfBudget, RecursionError):
        return None
    out = []
    for state, value in flow.returns:
        merged = plain(value)
        flag_value = ev.getattr(merged, flag, state, 0) if isinstance(merged, Obj) else UNKNOWN
        out.append((state, merged, flag_value))
    return out


def judge(q: Question) -> Iterator[Judgement]:
    groups = q.pack.kv_groups
    for scope in q.scopes:
        if scope.class_name not in q.facts.spec_classes or scope.node.name not in groups.merge_methods:
            continue
        if not has_decorator(scope.node, "classmethod"):
            continue
        for flag in _flag_of(q, scope, groups.flags):
            found = _judge_flag(q, scope, flag)
            if found is not None:
                yield found
                break


def _judge_flag(q: Question, scope: Scope, flag: str) -> Judgement | None:
    why: list[str] = []
    for group in DISAGREEING:
        returns = _run(q, scope, flag, group)
        if returns is None:
            return q.out_of_budget("SG201", scope, f"the merge on layers {list(group)}")
        for state, merged, value in returns:
            if not isinstance(merged, Obj):
                continue
            if not state.path:
                return _finding(q, scope, flag, group, merged, value)
            why.extend(f"depends on {d}" for d in doubts(state.path))
    if why:
        return q.undecided("SG201", scope, scope.node, f"`{scope.qualname}`", "; ".join(dict.fromkeys(why))[:300])
    for group in AGREEING:
        for state, merged, value in _run(q, scope, flag, group) or []:
            kept = plain(value)
            if isinstance(merged, Obj) and not state.path and isinstance(kept, bool) and kept != group[0]:
                return _lost(q, scope, flag, group, merged, value)
    return None


def _where(scope: Scope, merged: Obj, flag: str) -> ast.AST:
    node = merged.nodes.get(flag)
    inside = node is not None and scope.node.lineno <= getattr(node, "lineno", 0) <= (scope.node.end_lineno or 0)
    return node if inside else scope.node  # type: ignore[return-value]


def _reduction(value: Any, q: Question) -> _Reduction | None:
    found = [x for x in labels_of(value) if x.kind == REDUCED and x.span is not None and x.path == q.path]
    if len({x.span for x in found}) != 1:
        return None
    nearest = nearest_label(found)
    return _Reduction(nearest.span, nearest.text, nearest.how())  # type: ignore[arg-type]


def _finding(q: Question, scope: Scope, flag: str, group: tuple[bool, ...], merged: Obj, value: Any) -> Judgement:
    result = plain(value)
    meaning = _UNION if result is True else _MEET if result is False else _OTHER
    shown = repr(result) if isinstance(result, bool) else "a value it computes"
    reduction = _reduction(value, q)
    how = "that is "  # the first clause says what is wrong on its own (the concise line shows only it)
    if reduction is not None:
        how = f"merged with `{reduction.source}()`" + (f" ({reduction.how})" if reduction.how else "") + ", "
    message = (
        f"`{scope.qualname}` merges a KV-cache group whose layers disagree on `{flag}` ({list(group)}) into one "
        f"spec with `{flag}={shown}`; {how}{meaning}; the merge must require the specs to agree (fail for a "
        f"mixed group, as the method's other agreement checks do), or every consumer of the merged flag must "
        f"recompute it per layer. The runtime guard's G3 (`VLLM_SPECGUARD=1`) reports a deployment's groups whose "
        f"layers disagree"
    )
    details = {"flag": flag}
    if reduction is not None:
        details["reduction"] = reduction.source
        details["reduction_span"] = ",".join(map(str, reduction.span))
    return q.judgement("SG201", scope, _where(scope, merged, flag), message, **details)


def _lost(q: Question, scope: Scope, flag: str, group: tuple[bool, ...], merged: Obj, value: Any) -> Judgement:
    message = (
        f"`{scope.qualname}` merges a KV-cache group whose layers all have `{flag}={group[0]}` into one spec with "
        f"`{flag}={plain(value)}`: a merge of layers that agree must keep their flag"
    )
    return q.judgement("SG201", scope, _where(scope, merged, flag), message, flag=flag, lost="1")


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in ctx.facts.judgements:
        if judgement.code != "SG201" or not judgement.decided:
            continue
        fix = _fix(ctx, judgement)
        message = judgement.message + (f"; no fix offered: {fix.reason}" if isinstance(fix, NoFix) else "")
        yield Diagnostic(None, message, judgement.scope, judgement.span, fix=fix if isinstance(fix, NodeFix) else None)


# ---- the fix: require agreement where the reduction was (specguard/fixes/agreement.py) ------------------


def _fix(ctx: RuleContext, judgement: Judgement) -> NodeFix | NoFix:
    if judgement.detail("lost"):
        return NoFix("the merge loses the flag of layers that agree, which requiring agreement does not mend")
    name, where, method = judgement.detail("reduction"), judgement.detail("reduction_span"), ctx.function_at(judgement)
    if not name or not where or method is None:
        return NoFix("the merged flag is not the result of one reduction in the merge; require agreement by hand")
    if name not in AGREEING_REDUCTIONS:
        return NoFix(f"`{name}()` has no value that stands for agreeing layers; require agreement by hand")
    at = tuple(map(int, where.split(",")))
    reduction = next((n for n in walked(method) if isinstance(n, ast.Call) and span(n) == at), None)
    if reduction is None:
        return NoFix(f"the `{name}()` is made outside the merge, where a check could change its other callers")
    layout = Layout(ctx.facts.line_length, indent_unit(ctx.text, method))
    return agreement_fix(ctx.text, method, judgement.detail("flag") or "", reduction, layout)


def _spec_class_with_flag(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return bool(facts.spec_classes) and any(flag in mentions for flag in pack.kv_groups.flags)


RULE = Rule(
    code="SG201",
    name="group-flag-any-merge",
    title="KV-cache group merge accepts layers that disagree on a causality flag",
    summary=(
        "Flags a `merge` classmethod of a KV-cache/attention spec class that, for a group of layers that disagree "
        "on a per-layer causality flag (`non_causal_multi_token_decode`, or another flag the pack lists), returns "
        "one merged spec instead of failing, whatever it computes the merged flag with (`any`, `max`, "
        "`sum(...) > 0`, `not all`, `True in`, `functools.reduce`, a loop, `object.__setattr__`, the first layer's "
        "spec); and one that loses the flag of a group whose layers agree."
    ),
    why=(
        "A KV-cache group shares one attention-metadata build, and the merge makes one spec stand for every "
        "layer of it. `any()` is a union: a group whose layers disagree carries its most permissive layer's "
        "flag (`all()`: its least permissive), a value that describes no single layer. That is sound only if "
        "every consumer of the merged flag recomputes it per layer, or if the group never mixes. vLLM's DCP fix "
        "took the second way and made the merge assert one value. vLLM 0.33.0 takes the first: it documents the "
        "merged flag as a group capability ('Runtime metadata still selects causal vs. non-causal mode') and its "
        "MLA metadata builder recomputes the flag from its own layers, because 'merge() unions this flag across "
        "the KV group' (0.28.0's builder read the merged flag instead). A consumer that reads the merged value "
        "as its layer's own lets a causal target layer attend without its causal mask, so the rule keeps "
        "reporting the union: require agreement, or check every consumer and suppress the finding "
        "(`# specguard: ignore[SG201]`) with the reason. In a deployment, the runtime guard's G3 "
        "(`VLLM_SPECGUARD=1`) reports the groups whose layers actually disagree."
    ),
    analysis=(
        "The rule evaluates the merge itself on concrete groups: specs of the class whose flag is `[True, False]` "
        "and `[False, True]` (they disagree) and `[True, True]` and `[False, False]` (they agree), every other "
        "field the same on every layer. A merge is correct when every disagreeing group fails (an `assert` or a "
        "`raise`, however the agreement check is written: a set of the values of one element, each spec compared "
        "with the first, dataclass equality of the specs, in a helper function or method or not) and every "
        "agreeing group merges to a spec with its flag. A `raise` or a failing `assert` ends its path; calls of "
        "the project's functions are followed with the group's values.",
        "Unknown stays unknown: where a disagreeing group returns a spec only past a test the evaluation cannot "
        "decide about the flags (a helper it cannot read), the merge is not reported; such merges are counted "
        "(`--statistics`) and listed with the reason (`-v`).",
    ),
    bad="""
        import functools
        import operator
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                assert all(isinstance(s, MLAAttentionSpec) for s in specs), "one kind per group"
                return cls(
                    non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),  # SG201
                )

        @dataclass(frozen=True)
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flag = max(s.non_causal_multi_token_decode for s in specs)
                return cls(non_causal_multi_token_decode=flag)  # SG201: through `flag`

        @dataclass(frozen=True)
        class DSparkAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flags = [s.non_causal_multi_token_decode for s in specs]
                flag = functools.reduce(operator.or_, flags)
                return cls(non_causal_multi_token_decode=flag)  # SG201: a fold
    """,
    good="""
        from dataclasses import dataclass

        def _one(values, name):
            if len(values) != 1:
                raise ValueError(f"layers of one KV cache group disagree on {name}: {sorted(values)}")
            return next(iter(values))

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flags = {s.non_causal_multi_token_decode for s in specs}
                assert len(flags) == 1, "layers of one KV cache group must agree on causality"
                return cls(non_causal_multi_token_decode=flags.pop())

        @dataclass
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                first = specs[0].non_causal_multi_token_decode
                for spec in specs[1:]:
                    if spec.non_causal_multi_token_decode != first:
                        raise ValueError("layers of one KV cache group must agree on causality")
                return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))

        @dataclass
        class DSparkAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flag = _one({s.non_causal_multi_token_decode for s in specs}, "non_causal_multi_token_decode")
                return cls(non_causal_multi_token_decode=flag)  # the check is in a helper
    """,
    check=check,
    applies=_spec_class_with_flag,
    judge=judge,
    limits=(
        Limit(
            "A merge that hands its specs to a function the evaluation cannot read (of a package outside the "
            "analyzed tree) is not decided: that function may be the check that fails a mixed group. Such merges "
            "are counted (`--statistics`) and listed with the call (`-v`).",
            missed="""
                from dataclasses import dataclass

                from myfork.checks import check_group

                @dataclass
                class MLAAttentionSpec:
                    non_causal_multi_token_decode: bool = False

                    @classmethod
                    def merge(cls, specs):
                        check_group(specs)
                        return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
            """,
        ),
        Limit(
            f"Calls are followed {MAX_DEPTH} deep: an agreement check that lies deeper in helpers is an unknown test "
            "on the flags, so the merge is not decided (`--statistics`, `-v`) even where that check is wrong.",
            missed="""
                from dataclasses import dataclass

                def _agree(values):
                    return _one(values)

                def _one(values):
                    return _count(values)

                def _count(values):
                    return _at_least(values)

                def _at_least(values):
                    return _size(values) >= 1  # wrong: a mixed group has two values

                def _size(values):
                    return len(values)

                @dataclass
                class MLAAttentionSpec:
                    non_causal_multi_token_decode: bool = False

                    @classmethod
                    def merge(cls, specs):
                        flags = {s.non_causal_multi_token_decode for s in specs}
                        if not _agree(flags):
                            raise ValueError("layers of one KV cache group must agree")
                        return cls(non_causal_multi_token_decode=any(flags))
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): '
        "`MLAAttentionSpec.merge` (`vllm/v1/kv_cache_interface.py`) asserts that the layers of a KV-cache group agree "
        "on `non_causal_multi_token_decode`; vLLM 0.30.0 and later merge it with `any()` again.",
    ),
    fix_availability="sometimes",
    fix_summary=(
        "Safe: the values the reduction reduced are collected in a set just before the statement that held it, "
        "the merge fails unless the set holds at most one value, and the reduction runs over that set instead. It"
        " fails as the merge's own checks fail: an `assert` with a message where the method checks with asserts "
        "(vLLM's merges do, and so does vLLM's own fix in 0.29.0), `raise AssertionError` where it has none, so "
        "every caller that probes `merge` keeps working and puts disagreeing layers in separate groups (vLLM's "
        "`is_kv_cache_spec_uniform` and KV-cache grouping catch `AssertionError`). It is safe because where the "
        "layers agree, `any`, `all`, `max` and `min` of the distinct values give what they gave over every "
        "layer's value, an empty group included, so the merge returns what it returned; only a group whose layers"
        " disagree, the input the rule reports, now fails. A project that unions the flag on purpose and "
        "recomputes it per layer in every consumer should suppress the finding instead: the fix would split such "
        "groups. Offered where the merged flag is the result of one `any`, `all`, `max` or `min` of one iterable "
        "in a simple statement or an `if` test of the merge itself (not in a lambda or comprehension, whose names "
        "the check could not see, nor around a comment it would lose); a flag merged otherwise (`sum`, "
        "`functools.reduce`, a loop, a reduction in a helper) keeps its finding, and the message says why."
    ),
    fixed="""
        import functools
        import operator
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                assert all(isinstance(s, MLAAttentionSpec) for s in specs), "one kind per group"
                non_causal_multi_token_decode_values = {
                    s.non_causal_multi_token_decode for s in specs
                }
                assert len(non_causal_multi_token_decode_values) <= 1, (
                    f"{cls.__name__}: all layers of one KV cache group must agree on "
                    f"non_causal_multi_token_decode, got {non_causal_multi_token_decode_values}"
                )
                return cls(
                    non_causal_multi_token_decode=any(
                        non_causal_multi_token_decode_values
                    ),  # SG201
                )

        @dataclass(frozen=True)
        class DraftAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                non_causal_multi_token_decode_values = {
                    s.non_causal_multi_token_decode for s in specs
                }
                if len(non_causal_multi_token_decode_values) > 1:
                    raise AssertionError(
                        f"{cls.__name__}: all layers of one KV cache group must agree on "
                        "non_causal_multi_token_decode, got "
                        f"{non_causal_multi_token_decode_values}"
                    )
                flag = max(non_causal_multi_token_decode_values)
                return cls(non_causal_multi_token_decode=flag)  # SG201: through `flag`

        @dataclass(frozen=True)
        class DSparkAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                flags = [s.non_causal_multi_token_decode for s in specs]
                flag = functools.reduce(operator.or_, flags)
                return cls(non_causal_multi_token_decode=flag)  # SG201: a fold
    """,
)

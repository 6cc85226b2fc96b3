"""SG202 dcp-causal-bound-geometry: rows expanded per query token, the global causal bound left per request."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from specguard.evaluation.choices import MAX_PATHS, Choices, Path, each_path
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import Frame
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    Abstract,
    Function,
    Label,
    Method,
    Obj,
    Opaque,
    Sym,
    known,
    labels_of,
    maybe_of,
    place_text,
    plain,
    relabelled,
)
from specguard.findings import Judgement
from specguard.program.ast_tools import span, walked
from specguard.program.tree import ClassInfo
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements
from specguard.rules.judging import (
    OutOfBudget,
    Question,
    Scope,
    bind_arguments,
    bind_parameters,
    callee,
    reaching_functions,
    reaching_imports,
    reaching_methods,
    words,
    writes_of,
)

# Label kinds: a tensor of row indices (which call made it), and a tensor expanded to one row per query token (by
# which map: the map's maker, or the repeat count).
ROW_MAP, ROWS = "row-map", "rows"
GATHERS = frozenset({"index_select"})  # `x.index_select(dim, rows)`: a gather by a row map, as `x[rows]` is
# library calls that always give a tensor (a row map made by one is never None)
TENSOR_MAKERS = frozenset(
    {"arange", "searchsorted", "repeat_interleave", "cumsum", "cat", "stack", "zeros", "ones", "empty", "full"}
    | {"tensor", "as_tensor", "from_numpy", "clamp", "clamp_", "where", "gather", "index_select"}
)
ABSENT: Any = object()
UNREAD: Any = object()  # the bound may be in a `**` mapping the evaluation could not read
# a launch: (the call in the judged function, {row param: value}, the bound's value, the kernel's call)
Site = tuple[ast.AST, dict[str, Any], Any, ast.Call]


class _Rows(Hooks):
    """Row geometry as values: what each MLA decode launch gets as its rows and as its global causal bound."""

    def __init__(self, q: Question) -> None:
        mla = q.pack.mla
        self.q, self.entries, self.expanders = q, set(mla.decode_entry), set(mla.row_expanders)
        self.row_params, self.bound = tuple(mla.row_params), mla.global_bound_param or ""
        self.sites: list[Site] = []

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: Any
    ) -> Any:
        inner = plain(func)
        name = inner.name.rpartition(".")[2] if isinstance(inner, (Opaque, Method)) else None
        if name is None:
            target = callee(func)
            if target is None or target.name not in self.entries:
                return NOT_HANDLED
            name = target.name
        if name in self.entries:
            self._launch(ev, func, args, kwargs, node)
            return UNKNOWN
        receiver = inner.receiver if isinstance(inner, Method) else (args[0] if args else UNKNOWN)
        rest = args if isinstance(inner, Method) else args[1:]
        if name in self.expanders:  # `x.repeat_interleave(n)`: each row repeated n times
            count = rest[0] if rest else kwargs.get("repeats", UNKNOWN)
            text = ast.unparse(node.args[-1 if isinstance(inner, Opaque) else 0]) if node.args else "?"
            return _expanded(receiver, f"`{name}({_identity(count, text)})`")
        if name in GATHERS and len(rest) >= 2:
            return _expanded(receiver, _map_of(rest[1], ast.unparse(node.args[-1]), str(ev.home)))
        if name == "expand" and isinstance(inner, Method):
            sizes = [a for a in args if not (known(plain(a)) and plain(a) == -1)]
            return _expanded(receiver, f"`expand({', '.join(_identity(s, '?') for s in sizes)})`")
        if isinstance(inner, Opaque) and not ev.evaluates(inner.name):
            # a tensor a library call makes (`torch.arange`, `torch.searchsorted`): a map of its own, known by
            # where it is made
            made = Label(ROW_MAP, ast.unparse(node.func), span(node), str(frame.module.path))
            # a tensor factory's result exists; another library call may give None
            return Abstract(frozenset({made}), exists=inner.name.rpartition(".")[2] in TENSOR_MAKERS)
        if isinstance(inner, Method) and _geometry([receiver]):
            # an elementwise op or a view keeps the rows it has, and a method of a tensor that exists gives one
            # (`torch.searchsorted(...).clamp_(max=n)` is never None)
            made = plain(receiver)
            return Abstract(_geometry([receiver]), exists=isinstance(made, Abstract) and made.exists)
        return NOT_HANDLED

    def subscript(self, ev: Any, base: Any, key: Any, node: ast.AST | None) -> Any:
        if known(plain(key)) or isinstance(plain(key), (tuple, slice)):
            return NOT_HANDLED
        if not any(x.kind in (ROW_MAP, ROWS) for x in labels_of(key)):
            return NOT_HANDLED  # an index that is not a tensor of rows the evaluation saw made (or expanded): a
            # lookup by a request count or a parameter is not a gather (see the rule's limits)
        text = ast.unparse(node.slice) if isinstance(node, ast.Subscript) else "?"  # type: ignore[attr-defined]
        return _expanded(base, _map_of(key, text, str(ev.home)))

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        """The judged instance has lived through earlier calls: a row map any of its methods may have kept on it
        is an earlier batch's, perhaps (any other attribute is read as the evaluation reads it)."""
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        kept = self.q.instance_attributes("SG202").value(obj.cls, attr, None, self._writes)
        if not any(x.kind == ROW_MAP for x in labels_of(kept)):
            return NOT_HANDLED
        return relabelled(kept, _earlier)

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        return writes_of(self.q, _Rows(self.q), function, me, lambda param, frame: Sym(param.arg), writes)

    def _launch(self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> None:
        target = callee(func)
        if target is None:
            values = dict(kwargs)
        else:
            values = {k: v for k, (v, _, _) in bind_arguments(target, args, kwargs, node).items()}
        rows = {p: values[p] for p in self.row_params if p in values}
        # a `**` mapping the evaluation cannot list may hold the bound: not absent, not known
        unread = STAR_KWARGS in kwargs and any(kw.arg is None for kw in node.keywords)
        bound = values.get(self.bound, UNREAD if unread else ABSENT)
        self.sites.append((ev.calls[0] if ev.calls else node, rows, bound, node))


def _earlier(label: Label) -> Label:
    """A row map or rows kept on the instance by an earlier call: another batch's geometry, perhaps."""
    if label.kind not in (ROW_MAP, ROWS) or label.text.endswith(_KEPT):
        return label
    return replace(label, text=label.text + _KEPT)


_KEPT = ", kept on the instance by an earlier call"


def _identity(value: Any, text: str) -> str:
    inner = plain(value)
    if known(inner):
        return repr(inner)
    return inner.name if isinstance(inner, Sym) else text


def _map_of(index: Any, text: str, home: str) -> str:
    """Which row map an index is: the calls that made it (and where), else its name."""
    made = sorted(
        {f"{x.text} ({place_text(x.path, x.span[0], home)})" for x in labels_of(index) if x.kind == ROW_MAP and x.span}
    )
    return " and ".join(f"`{m}`" for m in made) if made else f"`{_identity(index, text)}`"


def _geometry(values: list[Any]) -> frozenset[Label]:
    return frozenset(x for v in values for x in labels_of(v) if x.kind in (ROW_MAP, ROWS))


def _expanded(source: Any, how: str) -> Any:
    kept = frozenset(x for x in labels_of(source) if x.kind not in (ROWS, ROW_MAP))
    return Abstract(kept | {Label(ROWS, how)}, exists=True)


def _maps(value: Any) -> set[str]:
    return {x.text for x in labels_of(value) if x.kind == ROWS}


def judge(q: Question) -> Iterator[Judgement]:
    mla = q.pack.mla
    if not mla.global_bound_param:
        return
    # the functions that name the bound or the entry, or a method or function of the tree that reaches them (a
    # base class's launch, a helper that builds the kernel's keyword arguments): a preselection by reading
    names = {mla.global_bound_param, *mla.decode_entry}
    names |= reaching_methods(q, words(names)) | reaching_functions(q, words(names)) | reaching_imports(q, names)
    for scope in q.scopes:
        if scope.mentions(names):
            yield from _judge_scope(q, scope)


def _judge_scope(q: Question, scope: Scope) -> Iterator[Judgement]:
    def run(choices: Choices) -> list[Site]:
        hooks = _Rows(q)
        ev = q.evaluator(hooks)
        ev.choices = choices

        def parameter(param: ast.arg, frame: Frame) -> Any:
            """Each parameter an object of its own, so what a helper stores on it (a cached row map) is read back;
            of the class its annotation names, where the tree defines it, so that its methods run
            (`impl.<helper>`)."""
            promised = ev.reading(param.annotation, frame.module, frame.owner) if param.annotation else UNKNOWN
            inner = plain(promised)
            if isinstance(inner, Abstract) and isinstance(inner.kind, ClassInfo):
                return Obj(inner.kind, label=param.arg)
            return Sym(param.arg)

        ev.run(scope.function, bind_parameters(scope.function, q.self_value(scope), parameter, q.program))
        return hooks.sites

    # the tests that matter: those whose sides leave rows expanded differently, or a row map kept on an object
    noted = Choices(frozenset({ROWS}), kept_kinds=frozenset({ROW_MAP}))
    try:
        joined = run(noted)
        verdict = _verdict(q, scope, joined)
        # the paths joined may hide rows expanded without the bound: each path through the tests that set them,
        # in the launching function and its callees, or where those are too many, in the launching function only
        paths = each_path(run, noted) if verdict is None and _compared(joined) else []
        if paths is None:
            own = Choices(noted.kinds, kept_kinds=noted.kept_kinds, depth=0)
            run(own)
            paths = each_path(run, own)
    except (OutOfBudget, RecursionError):
        yield q.out_of_budget("SG202", scope)
        return
    if paths is None:
        why = f"the rows and the bound are set under tests with more than {MAX_PATHS} paths through them"
        yield q.undecided("SG202", scope, scope.node, "whether each path expands the bound like the rows", why)
        return
    verdicts = [_verdict(q, scope, path.result, path) for path in paths]
    found = [v for v in verdicts if v is not None]
    verdict = verdict or next((v for v in found if v.decided), found[0] if found else None)
    if verdict is not None:
        yield verdict


def _compared(sites: list[Site]) -> bool:
    """Whether some launch gets rows expanded on some path, and the bound (which a path may leave per request)."""
    return any(
        bound is not ABSENT and any(x.kind == ROWS for v in rows.values() for x in labels_of(v) | maybe_of(v))
        for _, rows, bound, _ in sites
    )


def _verdict(q: Question, scope: Scope, sites: list[Site], path: Path | None = None) -> Judgement | None:
    """The launches' rows against their bound: a finding, not decided, or None (the same geometry)."""
    bound_name = q.pack.mla.global_bound_param
    on = f" on the path where {path.describe(str(scope.module.path))}" if path is not None else ""
    for where, rows, bound, kernel in sites:
        expanded = {p: _maps(v) for p, v in rows.items() if _maps(v)}
        if not expanded or bound is ABSENT or bound is None:  # None on this path: no bound to compare
            continue
        if bound is UNREAD:
            spread = next((kw.value for kw in kernel.keywords if kw.arg is None), kernel)
            why = f"`**{ast.unparse(spread)}` may hold it, and the evaluation cannot read that mapping"
            return q.undecided("SG202", scope, where, f"`{bound_name}=` of the launch", why)
        names = " and ".join(f"`{p}`" for p in expanded)
        by = sorted(set().union(*expanded.values()))
        node = _bound_node(scope, bound_name) or where
        entry = kernel.func.attr if isinstance(kernel.func, ast.Attribute) else ast.unparse(kernel.func)
        if not _maps(bound):
            if any(x.kind == ROWS for x in maybe_of(bound)):
                return q.undecided("SG202", scope, node, f"`{bound_name}=` of `{entry}`", "whether it is expanded")
            message = (
                f"`{scope.qualname}` expands {names} to one row per query token (by {', '.join(by)}) but hands "
                f"`{bound_name}` to `{entry}` per request{on}; expand it the same way (index it by the same row map)"
            )
        elif set(by) - _maps(bound):
            # on a path where the rows are expanded by a map the bound never carries, the bound is per request or
            # expanded another way
            other = sorted(set(by) - _maps(bound))
            message = (
                f"`{scope.qualname}` expands {names} to one row per query token by {', '.join(other)} but "
                f"`{bound_name}` only by {', '.join(sorted(_maps(bound)))}, another row geometry"
                f"{on or ' on that path'}; index it by the same row map"
            )
        else:
            continue
        return q.judgement("SG202", scope, node, message)
    return None


def _bound_node(scope: Scope, param: str) -> ast.AST | None:
    """Where the bound's value is written in the judged function: the kernel's keyword, an `.update(...)` keyword
    of the mapping it spreads, or that mapping's item (the last one written), if the function holds them."""
    found: ast.AST | None = None
    for node in walked(scope.node):
        if isinstance(node, ast.keyword) and node.arg == param:
            found = node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            key = target.slice if isinstance(target, ast.Subscript) else None
            if isinstance(key, ast.Constant) and key.value == param:
                found = node.value
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == param:
                    found = value
    return found


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in report_judgements("SG202", ctx):
        yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)


def _names_the_bound(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return (pack.mla.global_bound_param or "") in mentions


RULE = Rule(
    code="SG202",
    name="dcp-causal-bound-geometry",
    title="global causal bound not expanded like block_tables/seq_lens",
    summary=(
        "Flags a launch of the FlashInfer MLA decode entry (`trtllm_batch_decode_with_kv_cache_mla`) that gets "
        "`block_tables`/`seq_lens` expanded to one row per query token but the global causal bound "
        "`causal_seqlens_kv_global` per request, or expanded by another row map, on some path."
    ),
    analysis=(
        "The rule evaluates each function that names the bound, following its calls (a helper that launches the "
        "kernel, one that expands the rows and returns them), with row geometry as a property of values: "
        "`x.repeat_interleave(n)`, `x.expand(...)`, `x[rows]` and `x.index_select(d, rows)` give one row per query "
        "token by a map, where `rows` is a tensor a library call made (`torch.searchsorted`, `torch.arange`, and "
        "what is computed from it) and the map is known by the call that made it, or by the repeat count. Keyword "
        "arguments, `**kwargs` mappings built with `dict`, `.update` or items, tuples and dicts returned by "
        "helpers are followed. The bound is compared with the rows at the launch: not expanded, or expanded by "
        "another map, is a finding. Where the joined paths of the launching function's tests (and of the "
        "functions it calls) hide which options go together, each path through the tests that set the rows, the "
        "bound or a row map kept on an object is evaluated on its own (a test taken one way decides the same "
        "test again, and `x is None` narrows `x`), up to 32 paths; more is listed as not decided. The instance "
        "has lived through earlier calls: what its methods may have stored on it (a row map kept from an earlier "
        "batch) is read as such.",
    ),
    why=(
        "FlashInfer's decode kernel has no causal flag, so vLLM flattens each non-causal query block into one "
        "decode row per token. Under DCP the native context-parallel kernel also takes the global causal bound "
        "per row; left per request, its batch geometry disagrees with the expanded block table and sequence "
        "lengths and the kernel reads the wrong rows."
    ),
    bad="""
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def forward_mqa(q, kv_cache, decode, query_len, dcp_world_size, dcp_rank):
            block_table = decode.block_table.repeat_interleave(query_len, dim=0)
            seq_lens = decode.seq_lens.repeat_interleave(query_len)
            extra_kwargs = {}
            extra_kwargs.update(
                enable_dcp=True, cp_world=dcp_world_size, cp_rank=dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **extra_kwargs,
            )
    """,
    good="""
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def forward_mqa(q, kv_cache, decode, query_len, dcp_world_size, dcp_rank):
            block_table = decode.block_table.repeat_interleave(query_len, dim=0)
            seq_lens = decode.seq_lens.repeat_interleave(query_len)
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat_interleave(query_len)
            extra_kwargs = {}
            extra_kwargs.update(
                enable_dcp=True, cp_world=dcp_world_size, cp_rank=dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **extra_kwargs,
            )
    """,
    check=check,
    applies=_names_the_bound,
    judge=judge,
    limits=(
        Limit(
            "Paths are followed one by one in the launching function and the functions it calls; deeper helpers' "
            "paths are joined: one that returns the rows expanded under one test and the bound under another "
            "returns both as maybe expanded, so the paths where only one of them is expanded are not flagged.",
            missed="""
                from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

                def _expand(decode, n, causal, uniform):
                    block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
                    if not causal:
                        block_table = block_table.repeat_interleave(n, dim=0)
                        seq_lens = seq_lens.repeat_interleave(n)
                    if uniform:
                        bound = bound.repeat_interleave(n)
                    return block_table, seq_lens, bound

                def _rows(decode, n, causal, uniform):
                    return _expand(decode, n, causal, uniform)

                def forward_mqa(q, kv_cache, decode, causal, uniform, n):
                    block_table, seq_lens, bound = _rows(decode, n, causal, uniform)
                    return trtllm_batch_decode_with_kv_cache_mla(
                        query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens,
                        causal_seqlens_kv_global=bound,
                    )
            """,
        ),
        Limit(
            "An index the evaluation did not see made as a row map (a parameter, a field of one) is not read as "
            "one: it may as well be a request's number (`lens_by_size[batch_size]`). Rows gathered by a map the "
            "function is handed are flagged where the function that makes the map and launches is judged.",
            missed="""
                from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

                def forward_mqa(q, kv_cache, decode, rows):
                    return trtllm_batch_decode_with_kv_cache_mla(
                        query=q, kv_cache=kv_cache,
                        block_tables=decode.block_table[rows], seq_lens=decode.seq_lens[rows],
                        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                    )
            """,
        ),
        Limit(
            "Rows expanded by a function the evaluation cannot read (a library's) are not known to be expanded, so "
            "a bound left per request beside them is not flagged.",
            missed="""
                from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
                from mylib.rows import per_row

                def forward_mqa(q, kv_cache, decode, query_len):
                    return trtllm_batch_decode_with_kv_cache_mla(
                        query=q, kv_cache=kv_cache,
                        block_tables=per_row(decode.block_table, query_len),
                        seq_lens=per_row(decode.seq_lens, query_len),
                        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                    )
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): '
        "`FlashInferMLAImpl.forward_mqa` (`vllm/v1/attention/backends/mla/flashinfer_mla.py`) repeats the "
        "global causal bounds when non-causal DSpark blocks are flattened into decode rows.",
        'vllm-project/vllm#54012 ("Use FlashInfer native CP for MLA decode"): the native context-parallel '
        "MLA decode that takes `causal_seqlens_kv_global`.",
    ),
)

"""SG203 dcp-global-lens: under DCP, the MLA decode entry handed every rank's lengths beside this rank's pages."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import PurePath
from typing import Any

from specguard.evaluation.choices import MAX_PATHS, Choices, Path, each_path
from specguard.evaluation.expressions import division_operator
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.objects import self_built
from specguard.evaluation.paths import Frame, PathEnds
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    Abstract,
    Bound,
    EnumMember,
    Function,
    Label,
    Method,
    Obj,
    OneOf,
    Opaque,
    Partial,
    Sym,
    labels_of,
    maybe_of,
    place_text,
    plain,
    with_labels,
)
from specguard.findings import Judgement
from specguard.packs import Mla, Pack
from specguard.program.ast_tools import cached_on, dotted, span, walked
from specguard.program.tree import ClassInfo
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements
from specguard.rules.judging import (
    Callee,
    OutOfBudget,
    Question,
    Scope,
    aliases,
    annotated_own_class,
    bind_arguments,
    bind_parameters,
    called_as,
    callee,
    constructor_refuses,
    definition_text,
    held_classes,
    held_instance,
    is_batch_class,
    reaching_functions,
    reaching_imports,
    reaching_methods,
    words,
    writes_of,
)

# Label kinds: lengths of the whole sequence (where they were read), this rank's share, and a parameter of the
# judged function (whose lengths they are, its callers say).
GLOBAL, LOCAL, PARAM = "global-lens", "rank-local", "param"
# lengths divided by the number of DCP ranks, and this rank's index: the two together are this rank's share
SHARE, RANK = "share", "dcp-rank"
MULTI = "multi-token"  # a query viewed as [requests, tokens, heads, dim] with more than one token per request
TWICE = "localized-twice"  # this rank's share of lengths that were this rank's share already
# read from a field the launches read as this rank's lengths (`metadata.seq_lens_k`), filled by a step not run here:
# this rank's share by the framework's contract, for what is done with it next (localized again: TWICE); not a
# localization the function did, so a path that hands the launch the whole lengths beside it is still reported
KEPT = "kept-local"
# Tensor methods whose arguments are a shape: a view of the query, or a buffer made like it (`q.new_zeros((bs,
# max_q, heads, dim))`, which a draft extend pads its ragged query into).
_SHAPED = ("view", "reshape", "new_zeros", "new_empty", "new_ones")
# torch's own makers of a buffer of a shape (`torch.zeros((bs, max_q, heads, dim))`), the same form as a function.
_MADE = ("torch.zeros", "torch.empty", "torch.ones", "torch.full")
QUERY_TOKENS = 2  # the tokens per request of such a query where the evaluation runs (target verify, draft extend)
# a launch: (the call in the judged function, the lengths handed to the entry, the entry's call or the launch-read
# field left holding them, the calls on the way to it)
Site = tuple[ast.AST, Any, ast.expr, tuple[ast.AST, ...]]
DCP_SIZE = 2  # the ranks a request's KV is spread over where the evaluation runs with DCP on


class _Locality(Hooks):
    """Under DCP, which lengths each MLA decode launch gets: every rank's together, or this rank's share."""

    def __init__(
        self, q: Question, into: ast.AST | None = None, speculative: bool = False, decode: bool = False
    ) -> None:
        dcp, batches = q.pack.dcp, q.pack.batches
        self.q, self.entries, self.lens = q, set(q.pack.mla.decode_entry), q.pack.mla.lens_param or ""
        self.forms = q.pack.mla.launch_forms  # kernels known by their signature in the pack
        self.tests, self.sizes, self.localizers = set(dcp.enabled_tests), set(dcp.sizes), set(dcp.localizers)
        self.ranks = set(dcp.ranks)
        self.batch_fields, self.fields = set(dcp.batch_global_lens), set(dcp.global_lens)
        self.in_place, self.plans = set(dcp.in_place_localizers), set(q.pack.mla.plan_methods)
        self.batch_params = set(batches.batch_params)
        self.kept = set(dcp.local_lens)
        # whether the question is about a run with speculative decoding on too (a constructor's refusal of the pair)
        self.speculative = set(dcp.speculative_tests) if speculative else set()
        # whether the judged function is one the framework calls for one query token per request only
        self.decode = decode
        self.decode_tests = tuple(dcp.decode_tests)  # or where a test the path passed says the batch is a decode
        self.unsure_stores = False  # see `_left_whole`
        # launch-read fields left holding the whole lengths by a function that never asked whether DCP is on
        self.unasked_stores: list[Site] = []
        self.sites: list[Site] = []
        self.localized: list[Any] = []  # lengths rewritten to this rank's share in place, by identity
        # the judged function's parameters its own code treats as the whole lengths, with the call or store that
        # says so: handed to a localizer, or stored as the whole lengths (here or in a callee)
        self.admitted: dict[str, tuple[ast.AST, str]] = {}
        self.bound, self.query = q.pack.mla.global_bound_param or "", q.pack.mla.query_param or ""
        self.switch, self.varlen = q.pack.mla.dcp_flag_param or "", q.pack.mla.varlen_query_param or ""
        self.width = q.pack.mla.varlen_width_param or ""
        self.dcp_tested = False  # whether the evaluation asked whether DCP is on, or its size (before the launch)
        self.unbounded: list[tuple[ast.AST, Any, ast.Call]] = []  # multi-token launches under DCP with no bound
        self.local_bounds: list[tuple[ast.AST, Any, ast.Call]] = []  # launches under DCP bounded by this rank's share
        self.open_queries: list[tuple[ast.AST, Any]] = []  # launches with no bound of a query the function is handed
        # launches with no bound of a query of several tokens per request, DCP not asked by then: its callers may
        self.unasked: list[tuple[ast.AST, Any]] = []
        # a caller's evaluation: the calls of the function `into` are not followed, what they hand it is kept
        # (with whether DCP was asked by then)
        self.into = into
        self.handed: list[tuple[dict[str, Any], bool]] = []
        # a holder's evaluation: calls of `into` spelled on the attribute that holds an instance of its class
        # (`self.indices_updater_decode.update(...)`), whatever the evaluation makes of that attribute
        self.spelled: tuple[frozenset[str], Function] | None = None
        self.own_root = _package_root(q)

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: Any
    ) -> Any:
        inner = plain(func)
        if self.into is not None:
            target = callee(func)
            if self.spelled is not None and ast.unparse(node.func) in self.spelled[0]:
                target = Callee(self.spelled[1].name, True, self.spelled[1], bound=True)
            if target is not None and target.function is not None and target.function.node is self.into:
                given = {k: v for k, (v, _, _) in bind_arguments(target, args, kwargs, node).items()}
                self.handed.append((given, self.dcp_tested))
                return UNKNOWN
        name = inner.name.rpartition(".")[2] if isinstance(inner, (Opaque, Method)) else None
        if name is None:
            target = callee(func)
            name = target.name if target is not None else None
        if name in self.tests:
            self.dcp_tested = True
            return True  # the question is about a run under DCP
        if name in self.speculative:
            return True
        if name in self.sizes:
            self.dcp_tested = True
            return DCP_SIZE
        if name in self.ranks:
            return _rank(name, node, str(frame.module.path))
        form = self.forms.get(name or "") if name not in self.entries else None
        if name in self.entries or form is not None:
            target = callee(func)
            values = (
                dict(kwargs)
                if target is None
                else {k: v for k, (v, _, _) in bind_arguments(target, args, kwargs, node).items()}
            )
            if form is not None and (target is None or target.function is None):
                # a kernel whose code the tree does not hold: its signature in the pack binds its positions
                positional = [*(target.partial_args if target is not None else ()), *args]
                values = {**dict(zip(form.params, positional, strict=False)), **values}
            if form is not None and form.sparse and plain(values.get(form.sparse)) is not None:
                return UNKNOWN  # a sparse launch: it reads the KV at the indices handed, whatever the lengths
            lens_name, query_name = (form.lens, form.query or "") if form else (self.lens, self.query)
            where = ev.calls[0] if ev.calls else node
            self._launch(ev, values.get(lens_name, UNKNOWN), node, frame)
            query, bound = values.get(query_name, UNKNOWN), values.get(self.bound)
            if self.switch and plain(values.get(self.switch)) is True:
                self.dcp_tested = True  # the launch itself says it runs under DCP
            unread = STAR_KWARGS in kwargs and any(kw.arg is None for kw in node.keywords)
            width = values.get(self.width, UNKNOWN)
            one_each = isinstance(plain(width), int) and plain(width) <= 1
            if self.varlen in values and plain(values[self.varlen]) is not None and not _multi(query) and not one_each:
                # its tokens laid out flat, the offsets handed beside it: several per request (as many as the
                # width argument, as written, says: a count the function compares is not decided, see `_compared`)
                given = next((kw for kw in node.keywords if kw.arg == self.varlen), node)
                written = next((ast.unparse(kw.value) for kw in node.keywords if kw.arg == self.width), "")
                flat = Label(
                    MULTI, f"a ragged query, `{self.varlen}=`", span(given), str(frame.module.path), origin=written
                )
                query = Abstract(frozenset({flat}), exists=True)
            if bound is not None and plain(bound) is not None and self.dcp_tested and _only_local(bound):
                self.local_bounds.append((where, bound, node))
            if plain(bound) is None and not unread:
                if _multi(query) and self.dcp_tested:
                    self.unbounded.append((where, query, node))
                elif _handed_on(query, node, query_name):
                    self.open_queries.append((where, query))  # what the callers hand it decides (and DCP's asking)
                elif _multi(query):
                    self.unasked.append((where, query))
            return UNKNOWN
        made_like = isinstance(inner, Opaque) and inner.name in _MADE
        if (isinstance(inner, Method) and inner.name in _SHAPED or made_like) and args:
            shape = plain(args[0]) if len(args) == 1 or made_like else args  # one tuple, or one by one
            tokens = plain(shape[1]) if isinstance(shape, (list, tuple)) and len(shape) == 4 else 1
            if tokens == -1 and (self.decode or _decode_on_path(state, self.decode_tests)):
                tokens = 1  # as many as the query holds per request, in a decode: one
            if tokens != 1 and not (isinstance(tokens, int) and tokens < 1 and tokens != -1):
                # [requests, tokens, heads, dim] with a token count that is not one: a target verify or draft extend
                # (`-1`: as many as the query holds per request, which SGLang's target verify writes; a decode pins
                # one, `unsqueeze(1)`)
                written = (
                    node.args[0].elts if len(node.args) == 1 and isinstance(node.args[0], ast.Tuple) else node.args
                )
                count = ast.unparse(written[1]) if len(written) > 1 else ""
                made = Label(MULTI, f"`{ast.unparse(node)}`", span(node), str(frame.module.path), origin=count)
                return Abstract(frozenset({made}), exists=True)
            if isinstance(inner, Method) and _multi(inner.receiver):  # one token per row now: no such query
                return Abstract(_locality([inner.receiver]), exists=True)
        if isinstance(inner, Method) and _multi(inner.receiver):
            if inner.name == "dim":
                return 4
            return Abstract(_multi_labels([inner.receiver]), exists=True)  # `.to(dtype)`, `.contiguous()`: the same
        if isinstance(inner, Method) and inner.name == "copy_" and args:
            if _kept_field(node, self.fields):
                self._admits(args[0], node, frame.module)  # `metadata.global_seq_lens_k.copy_(lens)`
            whole = _kept_field(node, self.fields) is not None  # (a whole-lengths field reads as one: see `attribute`)
            field = _kept_field(node, self.kept) or (None if whole else _copied_into(node.func.value))  # type: ignore[attr-defined]
            if field is not None:
                # `metadata.seq_lens_k.copy_(lens)`, `buffer.copy_(lens)`, `self.static_lens[:bs].copy_(lens)`: it
                # holds those lengths now, whatever it held (a CUDA graph's static buffer, read again later)
                ev.assign(field, args[0], frame, state, node)
                return NOT_HANDLED
        handed = _planning_keyword(self.q.pack.mla, node)
        if handed is not None:  # a framework's call that plans with the lengths handed under this keyword
            if handed in kwargs:
                self._launch(ev, kwargs[handed], node, frame)
            return NOT_HANDLED
        planned = _unbound(inner, args, kwargs)
        if planned is not None and planned[0].name.rpartition(".")[2] in self.plans:
            lens = self._planned_lens(*planned[1:])  # `wrapper.plan(...)`: a library's, never followed
            if lens is not None:
                self._launch(ev, lens, node, frame)
            return NOT_HANDLED
        built = _built_metadata(self.q.pack.mla, inner, node, args, kwargs)
        if built is not None:
            return built
        if (name in self.localizers or name in self.in_place) and args and self._one_rank(func, args, kwargs, node):
            return args[0]  # a share of one rank is the whole: `get_dcp_lens(lens, 1, 0)` hands `lens` back
        if name in self.localizers or name in self.in_place:
            handed = args[0] if args else UNKNOWN
            self._admits(handed, node, frame.module)
            share = Label(LOCAL, f"`{ast.unparse(node.func)}`", span(node), str(frame.module.path))
            if _only_local(handed):  # a share of what was this rank's share already: wrong lengths on every rank
                share = Label(
                    TWICE, f"`{ast.unparse(node.func)}`{_after(handed, frame)}", span(node), str(frame.module.path)
                )
            made = Abstract(frozenset({share}))
            out = node.args[0] if node.args else None
            if name in self.in_place and isinstance(out, (ast.Name, ast.Attribute, ast.Subscript)):
                # the lengths it was handed are this rank's now, under every name that holds them (a helper's
                # parameter and its caller's variable are one tensor)
                self.localized.append(plain(ev.eval(out, frame, state)))
                ev.assign(out, made, frame, state, node)
                return NOT_HANDLED
            return made
        if isinstance(inner, Method) and _locality([inner.receiver]) and division_operator(inner.name, kwargs) is None:
            return Abstract(_locality([inner.receiver]), exists=True)  # `.to(...)`, `.int()`: the same lengths
        return NOT_HANDLED

    def _one_rank(self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> bool:
        """Whether a localizer whose code the tree holds is handed one DCP rank (a parameter the pack's `sizes`
        names bound to 1, a default included): its share is then every length."""
        target = callee(func)
        if target is None:
            return False
        bound = bind_arguments(target, args, kwargs, node)
        return any(plain(bound[p][0]) == 1 for p in self.sizes if p in bound)

    def _launch(self, ev: Any, lens: Any, node: ast.expr, frame: Frame) -> None:
        """A launch (or plan) handed `lens`, as a site of the judged function; not where the launch and every read
        of the whole lengths it gets lie in code beside the judged package (the framework method a fork's override
        delegates to, `super().init_forward_metadata(batch)`): that is the framework's own finding, made where its
        code is checked, and the caller handed it no lengths."""
        left = self._as_left(lens)
        read = _global(left)
        if read and all(self._beside(path) for path in (str(frame.module.path), *(x.path for x in read))):
            return
        self.sites.append((ev.calls[0] if ev.calls else node, left, node, tuple(ev.calls)))

    def _beside(self, path: str | None) -> bool:
        if self.own_root is None or path is None:
            return False
        return not PurePath(path).is_relative_to(self.own_root)

    def _planned_lens(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The lengths a plan call of the wrapper is handed, in whichever form it is called; None: a method of
        that name that is no plan."""
        mla = self.q.pack.mla
        if mla.plan_metadata_param and mla.plan_metadata_param in kwargs:
            metadata = plain(kwargs[mla.plan_metadata_param])
            fields = metadata.fields if isinstance(metadata, Obj) else {}
            return next((fields[f] for f in mla.plan_metadata_lens if plain(fields.get(f)) is not None), UNKNOWN)
        form = _plan_form(mla, len(args), set(kwargs))
        if form is None:
            return None
        lens_param, order = form
        return {**dict(zip(order, args, strict=False)), **kwargs}.get(lens_param, UNKNOWN)

    def attribute(self, ev: Any, base: Any, attr: str, value: Any, node: ast.AST | None, state: Any) -> Any:
        if attr in self.tests:
            self.dcp_tested = True
            return True
        if attr in self.speculative:
            return True  # set (not None) and on
        if attr in self.sizes:
            self.dcp_tested = True
            return DCP_SIZE
        if attr in self.ranks:
            return _rank(attr, node, str(ev.here))
        if attr == "shape" and _multi(base):
            return (UNKNOWN, QUERY_TOKENS, UNKNOWN, UNKNOWN)
        handed = _params(value) & _params(base)  # (a parameter's lengths kept on another object are those lengths)
        if handed and isinstance(value, Abstract):  # a field of a parameter is not the parameter
            value = replace(value, labels=value.labels - handed, maybe=value.maybe - handed)
        if attr in self.kept and node is not None and not _locality([value]) and not self._unpaired(ev, base, state):
            # (see KEPT; where a function leaves the whole lengths there, that store is what is reported)
            read = Label(KEPT, f"`{ast.unparse(node)}` (this rank's share)", span(node), str(ev.here))
            return with_labels(value, frozenset({read}))  # (what else the evaluation knows of it stands: a name)
        if handed and isinstance(value, Abstract) and attr not in self.fields:
            return value  # (a whole-lengths field, `metadata.global_seq_lens_k`, is read as one, below)
        if _locality([value]) or node is None:
            return NOT_HANDLED  # what the evaluation knows of the field (lengths stored there) stands
        batch = attr in self.batch_fields and self._is_batch(base)
        if attr in self.fields or batch:
            read = Label(GLOBAL, f"`{ast.unparse(node)}`", span(node), str(ev.here))
            # a batch's lengths are always there; a metadata's field may be unset (None) until a step fills it
            return Abstract(frozenset({read}), exists=batch)
        return NOT_HANDLED

    def _unpaired(self, ev: Any, base: Any, state: Any) -> bool:
        """Whether this path found the object's whole-lengths field unset (`if md.global_seq_lens_k is None:`):
        the framework fills it where it makes the kept field this rank's share, so that one is not."""
        return any(plain(ev.getattr(base, field, state, 0)) is None for field in self.fields)

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        """Lengths a method of the judged instance kept on it (once a step, for every layer's launch): what its
        writers store there, run as they are written (an override's writer, where the class has one)."""
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        kept = self.q.instance_attributes("SG203", constructed=True).value(obj.cls, attr, None, self._writes)
        # lengths, the batch they are read from, a kernel bound once with `partial` or a callable kept to apply
        # (a lambda, a bound method: the same every call), or a setting its constructor chose under DCP
        # (`LenSource.RANK_SHARD if get_parallel().dcp_enabled else ...`, the DCP size it read from the server's
        # arguments), or keywords kept to hand on (`self.fast_decode_kwargs = {"kv_indices": ...}`; not an empty
        # dict, which other methods fill by key, as CUDA-graph capture fills `self.decode_cuda_graph_metadata[bs]`)
        kinds = (Partial, Function, Bound, EnumMember, bool, int)
        inner = plain(kept)
        keywords = isinstance(inner, dict) and bool(inner) and all(isinstance(k, str) for k in inner)
        useful = _locality([kept]) or self._is_batch(kept) or isinstance(inner, kinds) or keywords
        # (an object of its own package's class kept from the constructor's annotated parameter, whose methods
        # run; not one the constructor builds, whose fields other code may set: a configuration)
        useful = useful or isinstance(inner, Obj) and held_instance(self.q, obj.cls, attr) is not None
        # (or a frozen settings record its class builds from the server's arguments: what its factory read)
        useful = useful or isinstance(inner, Abstract) and inner.kind is not None and self_built(inner.kind)
        return kept if useful or _holds_lengths(kept) else NOT_HANDLED

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        # the constructor that runs, whole: what it has its bases' (`super().__init__(...)`) and its own private
        # helpers write too
        return writes_of(
            self.q, _Locality(self.q), function, me, partial(_held_parameter, self.q), writes, own_calls=True
        )

    def subscript(self, ev: Any, base: Any, key: Any, node: ast.AST | None) -> Any:
        if isinstance(plain(base), (dict, list, tuple)):
            return NOT_HANDLED  # a container the evaluation holds: the item looked up, not all of them
        return Abstract(_locality([base]), exists=True) if _locality([base]) else NOT_HANDLED

    def divided(self, ev: Any, value: Any, divisor: str) -> frozenset[Label]:
        """Lengths divided by the number of DCP ranks: this rank's share where its index enters too (see
        `_global`), worked out in place (`lens // world + (rank < lens % world)`)."""
        if divisor == repr(DCP_SIZE) and any(x.kind in (GLOBAL, PARAM) for x in labels_of(value)):
            return frozenset({Label(SHARE, "a share by the number of DCP ranks", None, str(ev.here))})
        return frozenset()

    def _admits(self, value: Any, node: ast.AST, module: Any) -> None:
        """The judged function's parameters `value` comes from are, by its own code, the whole lengths."""
        for param in _params(value):
            self.admitted.setdefault(param.text, (node, str(module.path)))

    def admitted_stores(self, ev: Any) -> None:
        """`metadata.global_seq_lens_k = lens` (the evaluation watched those fields): `lens` is the whole lengths."""
        for outcome in ev.outcomes:
            if outcome.site.kind == "assign" and outcome.site.message in self.fields:
                self._admits(outcome.detail[1], outcome.site.node, outcome.site.module)

    def _as_left(self, lens: Any) -> Any:
        """Lengths as a launch reads them: this rank's share where a localizer rewrote that very tensor in place."""
        inner = plain(lens)
        if any(inner is rewritten for rewritten in self.localized) and not isinstance(inner, (bool, int, type(None))):
            return Abstract(frozenset({Label(LOCAL, "rewritten in place")}))
        return lens

    def _is_batch(self, value: Any) -> bool:
        inner = plain(value)
        if isinstance(inner, Obj):
            return (inner.cls is not None and is_batch_class(self.q, inner.cls)) or inner.label in self.batch_params
        return isinstance(inner, Sym) and inner.name in self.batch_params


def _held_parameter(q: Question, param: ast.arg, frame: Frame) -> Any:
    """What a constructor's parameter is when the instance keeps it: an instance of the class its annotation names
    where that is one of the analyzed package's own (`backend: VendorDcpBackend`, whose methods then run where the
    instance calls them), else a value known by its name."""
    cls = annotated_own_class(q, frame.module.name, param.annotation)
    return Obj(cls, label=param.arg) if cls is not None else Sym(param.arg)


def _handed_on(query: Any, call: ast.Call, param: str) -> bool:
    """A query that is a parameter of the function judged, handed on as it came (`query=query`)."""
    given = next((kw.value for kw in call.keywords if kw.arg == param), None)
    names = {x.text for x in _params(query)}
    return isinstance(given, ast.Name) and names == {given.id}


def _unbound(func: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[Method, list[Any], dict[str, Any]] | None:
    """A call of a method of some object, with what a `functools.partial` around it bound placed first (`plan =
    partial(wrapper.plan, kv_len_arr=lens)`, then `plan(qo_indptr=...)`); None for any other callable."""
    while isinstance(func, Partial):
        args, kwargs = [*func.args, *args], {**func.kwargs, **kwargs}
        func = plain(func.func)
    return (func, args, kwargs) if isinstance(func, Method) else None


def _built_metadata(mla: Mla, func: Any, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Obj | None:
    """A plan's metadata object built by one of the pack's constructors whose code is not read (`MLAPlanMetadata
    .csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr)`): an object holding what it was handed, field by field."""
    if not mla.metadata_builders or isinstance(func, (Function, Bound)):
        return None
    spelled = dotted(node.func) or ""
    fields = next(
        (f for name, f in mla.metadata_builders.items() if spelled == name or spelled.endswith(f".{name}")), None
    )
    if fields is None:
        return None
    given = {**dict(zip(fields, args, strict=False)), **{k: v for k, v in kwargs.items() if k in fields}}
    return Obj(None, given, label="plan metadata")


def _decode_on_path(state: Any, tests: tuple[str, ...]) -> bool:
    """Whether this path passed a test saying its batch is a decode (`assert fb.forward_mode.is_decode_or_idle()`):
    the answers a path keeps, under the question's name (see `answer_key`)."""
    return any(
        truth is True
        and isinstance(key, tuple)
        and key[1:] == ("()",)
        and isinstance(key[0], str)
        and any(key[0] == t or key[0].endswith("." + t) for t in tests)
        for key, truth in state.writes.items()
    )


def _multi(value: Any) -> bool:
    return any(x.kind == MULTI for x in labels_of(value))


def _multi_labels(values: list[Any]) -> frozenset[Label]:
    return frozenset(x for v in values for x in labels_of(v) if x.kind == MULTI)


def _rank(name: str, node: ast.AST | None, path: str) -> Abstract:
    """This rank's index among the DCP ranks, not known."""
    return Abstract(frozenset({Label(RANK, f"`{name}`", span(node) if node is not None else None, path)}))


def _locality(values: list[Any]) -> frozenset[Label]:
    return frozenset(x for v in values for x in labels_of(v) if x.kind in (GLOBAL, LOCAL, PARAM, SHARE, RANK))


def _holds_lengths(value: Any) -> bool:
    """A record of lengths (a metadata object the planning method built, or None before it ran): an object, or one
    of a few values one of which is, with lengths among its fields."""
    inner = plain(value)
    for option in inner.options if isinstance(inner, OneOf) else (inner,):
        option = plain(option)
        if isinstance(option, Obj) and option.label != "self" and _locality(list(option.fields.values())):
            return True
    return False


def _global(value: Any) -> list[Label]:
    """Where the lengths were read as every rank's, if they come from such a read and never from a localizer
    (labels say where a value may come from: both, where paths met, is for each path to say)."""
    labels = labels_of(value) | maybe_of(value)
    kinds = {x.kind for x in labels}
    if LOCAL in kinds or {SHARE, RANK} <= kinds:  # a localizer's, or a share this rank's index entered
        return []
    # (lengths localized twice are as wrong for the launch: a share of a share)
    return sorted((x for x in labels if x.kind in (GLOBAL, TWICE)), key=lambda x: x.span)


def judge(q: Question) -> Iterator[Judgement]:
    mla, dcp = q.pack.mla, q.pack.dcp
    if not (mla.lens_param and dcp.enabled_tests and (dcp.global_lens or dcp.batch_global_lens)):
        return
    # the entry under the names this module binds it to (`self._decode = functools.partial(<entry>, ...)`)
    names = aliases(q, set(mla.decode_entry) | set(mla.launch_forms)) | set(mla.plan_methods) | set(dcp.local_lens)
    names |= set(mla.planning_call_holders)  # `self.indices_updater_decode.update(...)`
    names |= reaching_imports(q, names)  # first: a method may reach a launch through a helper it imports
    names |= reaching_methods(q, words(names), held_classes(q)) | reaching_functions(q, words(names))
    names |= aliases(q, names)  # `self._launch = functools.partial(<a helper that launches>, enable_dcp=True)`
    for scope in q.scopes:
        if scope.mentions(names):
            yield from _judged(q, scope)


def _judged(q: Question, scope: Scope) -> list[Judgement]:
    """The scope's judgements, made once per run: a caller's verdict may ask for them first (see `_callees`)."""
    key = ("sg203-judged", scope.module.name, scope.qualname, id(scope.node))
    if key not in q.program.memo:
        q.program.memo[key] = []  # while it is judged: a call back into it reports nothing
        # no instance of a class whose constructor refuses DCP runs under it, the only case the rule asks about
        refused = constructor_refuses(q, scope, partial(_Locality, q), "DCP")
        q.program.memo[key] = [] if refused else list(_judge_scope(q, scope))
    return q.program.memo[key]  # type: ignore[no-any-return]


def _evaluation(
    q: Question,
    function: Function,
    self_value: Any,
    hooks: _Locality,
    choices: Choices,
    given: dict[str, Any] | None = None,
) -> None:
    """`function` run with DCP on: each parameter what a caller gave (`given`), else an instance of the class the
    tree defines for its annotation (so that its methods run), a batch where it is one, else what its callers hand
    it."""
    ev = q.evaluator(hooks, watch_attrs=q.pack.dcp.global_lens)
    ev.choices = choices
    if function.node.name in q.pack.dcp.gated_methods:
        hooks.dcp_tested = True  # the framework calls it only with DCP on: its own text need not ask

    def parameter(param: ast.arg, frame: Frame) -> Any:
        if given is not None and param.arg in given:
            return given[param.arg]
        promised = ev.reading(param.annotation, frame.module, frame.owner) if param.annotation else UNKNOWN
        inner = plain(promised)
        if isinstance(inner, Abstract) and isinstance(inner.kind, ClassInfo) and not _optional(param.annotation):
            return Obj(inner.kind, label=param.arg)
        if param.arg in hooks.batch_params:
            return Sym(param.arg)
        return Abstract(frozenset({Label(PARAM, param.arg)}))

    flow = ev.run(function, bind_parameters(function, self_value, parameter, q.program))
    hooks.admitted_stores(ev)
    if hooks.kept:
        left = _left_whole(ev, function, hooks, [state for state, _ in flow.returns])
        left += _built_whole(function, hooks, flow.returns)
        if hooks.dcp_tested:
            hooks.sites.extend(left)
        else:  # whole lengths left there, with DCP never asked: whether it is on is its callers'
            hooks.unasked_stores.extend(s for s in left if _global(s[1]))


def _left_whole(ev: Any, function: Function, hooks: _Locality, ends: list[Any]) -> list[Site]:
    """The launch-read fields the function's own text stores (`metadata.seq_lens_k = ...`, `.copy_(...)`) that it
    leaves holding the whole lengths on some path, read at each path's end: a site at its last store there. Where
    the object it stores into is not known where paths met (one a callee made on some paths only) while such a
    field somewhere holds the whole lengths, each path is to be read on its own (`hooks.unsure_stores`)."""
    frame = Frame(function.module, function.owner, function.closure, 0)
    sites: list[Site] = []
    for target in _last_stores(function.node, frozenset(hooks.kept)):
        for state in ends:
            try:
                holder = plain(ev.eval(target.value, frame, state))
            except PathEnds:  # the read raises on this path (a property that fails): nothing is left there
                continue
            # what was stored there, as stored (a read through the rule's own hook would take a parameter's field
            # for something else than the parameter)
            # (an object the function only names, `self.decode_backend.forward_decode_metadata`, by that name)
            identity = id(holder) if isinstance(holder, Obj) else holder.name if isinstance(holder, Sym) else None
            value = state.writes.get((identity, target.attr), UNKNOWN) if identity is not None else UNKNOWN
            if any(x.kind in (GLOBAL, PARAM, TWICE) for x in labels_of(value) | maybe_of(value)):
                # whole lengths on some path (each path's run says), or what a caller hands (see `_handed`), or a
                # share of this rank's share
                sites.append((target, value, target, ()))
                break
            if plain(value) is UNKNOWN and not labels_of(value) and _holds_whole(state, target.attr):
                hooks.unsure_stores = True
    return sites


def _built_whole(function: Function, hooks: _Locality, returns: list[Any]) -> list[Site]:
    """The launch-read fields of objects the function builds (`TRTLLMMLADecodeMetadata(seq_lens_k=lens)`) and
    hands out, returned or stored on another object, holding the whole lengths at the end of some path: a site at
    the keyword that set them. A field assigned afterwards holds what was assigned (`_left_whole` reads those)."""
    lines = range(function.node.lineno, (function.node.end_lineno or 0) + 1)
    sites: list[Site] = []
    seen: set[int] = set()
    for state, value in returns:
        for obj in (plain(value), *(plain(v) for v in state.writes.values())):
            if not isinstance(obj, Obj) or id(obj) in seen:
                continue
            for field in hooks.kept:
                given = obj.nodes.get(field)
                if given is None or getattr(given, "lineno", 0) not in lines or (id(obj), field) in state.writes:
                    continue
                held = obj.fields.get(field)
                if any(x.kind in (GLOBAL, PARAM) for x in labels_of(held) | maybe_of(held)):
                    seen.add(id(obj))
                    named = ast.Attribute(ast.Name("metadata", ast.Load()), field, ast.Load())  # for the message
                    sites.append((given, held, ast.copy_location(named, given), ()))
    return sites


def _last_stores(function: ast.AST, fields: frozenset[str]) -> list[ast.Attribute]:
    """The last store the function's text makes to each launch-read field it names (by the field's spelling), read
    once per function: every run of it (one per path, per caller) asks again."""

    def read(node: ast.AST) -> list[ast.Attribute]:
        last: dict[str, ast.Attribute] = {}
        for inner in walked(node):
            target = _kept_field(inner, fields)
            if target is not None:
                seen = last.get(ast.unparse(target))
                if seen is None or (target.lineno, target.col_offset) > (seen.lineno, seen.col_offset):
                    last[ast.unparse(target)] = target
        return list(last.values())

    return cached_on(function, "sg203_last_stores_" + "_".join(sorted(fields)), read)  # type: ignore[no-any-return]


def _holds_whole(state: Any, attr: str) -> bool:
    """Whether some object's `attr` holds the whole lengths, maybe, in `state`."""
    return any(
        key[1] == attr and any(x.kind == GLOBAL for x in labels_of(value) | maybe_of(value))
        for key, value in state.writes.items()
    )


def _copied_into(target: ast.expr) -> ast.Name | ast.Attribute | None:
    """The buffer a `.copy_(...)` writes: a name or an attribute, its rows included (`buf[:bs]` is `buf`; an item
    of a container, `buffers["lens"]`, is not the container)."""
    while isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Slice):
        target = target.value
    return target if isinstance(target, (ast.Name, ast.Attribute)) else None


def _kept_field(node: ast.AST, fields: set[str]) -> ast.Attribute | None:
    """The field written, where `node` writes one of `fields`: `x.<field> = ...`, or `x.<field>.copy_(...)`; a
    slice of it copied into (`x.<field>[:bs].copy_(...)`) is the field: the rows a launch reads."""
    if isinstance(node, ast.Assign):
        return next((t for t in node.targets if isinstance(t, ast.Attribute) and t.attr in fields), None)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_":
        inner = node.func.value
        while isinstance(inner, ast.Subscript):
            inner = inner.value
        return inner if isinstance(inner, ast.Attribute) and inner.attr in fields else None
    return None


def _optional(annotation: ast.expr | None) -> bool:
    """`Optional[X]`, `X | None`: the caller may hand None, so no instance is assumed."""
    text = ast.unparse(annotation) if annotation is not None else ""
    return "Optional[" in text or "None" in text.replace("NoneType", "")


def _judge_scope(q: Question, scope: Scope) -> Iterator[Judgement]:
    hooks_of: list[_Locality] = []

    def run(choices: Choices) -> list[Site]:
        hooks = _Locality(q, decode=scope.qualname.rpartition(".")[2] in q.pack.dcp.decode_methods)
        _evaluation(q, scope.function, q.self_value(scope), hooks, choices)
        hooks_of[:] = [hooks]
        return hooks.sites

    noted = Choices(frozenset({GLOBAL, LOCAL}))
    try:
        joined = run(noted)
        first = hooks_of[0]
        if not first.dcp_tested and not _file_asks_dcp(q):
            return  # read for a launch-read field it names; nothing it runs, nor its file, asks about DCP
        if not first.dcp_tested and first.unasked_stores and next(_callers(q, scope), None) is None:
            # (one its class calls on itself is left to those callers: 0.5.18 calls its replay so only without DCP)
            where, _, field, _ = first.unasked_stores[0]
            yield q.undecided(
                "SG203",
                scope,
                where,
                f"whether the whole lengths it leaves in `.{field.attr}` (this rank's, as the launch reads them) "  # type: ignore[attr-defined]
                "are left there under DCP",
                "it never asks whether DCP is on (without DCP the two are the same lengths), and what its callers "
                "run it under is not followed",
            )
            return
        unbounded = _unbounded(q, scope, first.unbounded)
        bounded = _bounded_locally(q, scope, first.local_bounds)
        # where paths meet, lengths read on one of them and unknown on another are one value that carries the read:
        # each path through the tests that choose them says which paths hand the kernel the whole lengths
        paths = each_path(run, noted) if _doubtful(joined) or first.unsure_stores else []
        handed = _handed(q, scope, first)
    except (OutOfBudget, RecursionError):
        yield q.out_of_budget("SG203", scope)
        return
    judged = [v for v in (_verdict(q, scope, joined), unbounded, handed, bounded) if v is not None]
    verdict = next((v for v in judged if v.decided), judged[0] if judged else None)
    if paths is None:
        if verdict is None:
            why = f"the lengths are chosen under tests with more than {MAX_PATHS} paths through them"
            yield q.undecided("SG203", scope, scope.node, "whether each path hands the kernel this rank's lengths", why)
            return
        yield verdict
        return
    found = [_verdict(q, scope, path.result, path) for path in paths]
    if found and None not in found and verdict is not None:
        yield verdict  # every path does: no path to name
        return
    verdict = next((v for v in found if v is not None and v.decided), verdict)
    if verdict is not None:
        yield verdict


def _file_asks_dcp(q: Question) -> bool:
    """Whether a function of the file names what says DCP is on, its size, the entry's DCP switch or a method the
    framework calls only with DCP on (a file read only because it names `[dcp] local_lens` may not)."""
    key = ("sg203-file-asks-dcp", q.module.name)
    if key not in q.program.memo:
        names = set(_asking_dcp(q.pack))
        q.program.memo[key] = any(scope.mentions(names) for scope in q.scopes)
    return q.program.memo[key]  # type: ignore[no-any-return]


def _asking_dcp(pack: Pack) -> tuple[str, ...]:
    """The names that ask whether DCP is on or say the code runs under it: its tests, its size, the entry's DCP
    switch, the methods the framework calls only with DCP on."""
    dcp = pack.dcp
    return tuple(n for n in (*dcp.enabled_tests, *dcp.sizes, pack.mla.dcp_flag_param, *dcp.gated_methods) if n)


def _unbounded(
    q: Question, scope: Scope, launches: list[tuple[ast.AST, Any, ast.Call]], how: str = ""
) -> Judgement | None:
    """A launch under DCP of a query with more than one token per request, without the global causal bound."""
    if launches and _refuses_speculation(q, scope):
        return None
    for where, query, kernel in launches:
        made = sorted((x for x in labels_of(query) if x.kind == MULTI), key=lambda x: x.span)[0]
        entry = _entry(kernel)
        at = place_text(made.path, made.span[0], str(scope.module.path))
        tested = _compared(scope, made.origin)
        if tested is not None:
            what = f"whether a query of more than one token per request reaches `{entry}` under DCP"
            why = (
                f"its token count is compared in `{ast.unparse(tested)}` (line {tested.lineno}), and what a "
                "comparison leaves a count is not narrowed by the evaluation"
            )
            return q.undecided("SG203", scope, where, what, why)
        bound = f"no `{q.pack.mla.global_bound_param}`"
        if entry in q.pack.mla.launch_forms:  # a kernel with no global bound to pass
            bound = f"no global causal bound (`{entry}` takes none)"
        message = (
            f"`{scope.qualname}` launches `{entry}` under DCP{how} with a query of more than one token per request "
            f"({made.text}, {at}) and {bound}: each rank holds only its share of the KV, so each query token's "
            f"causal limit must be given as a global position; pass the global bound (to a kernel that takes it) or "
            f"refuse that query under DCP"
        )
        return q.judgement("SG203", scope, where, message)
    return None


def _after(lens: Any, frame: Frame) -> str:
    """Where lengths handed to a localizer were made this rank's share before, as a trail names it."""
    before = sorted(
        (x for x in labels_of(lens) | maybe_of(lens) if x.kind in (LOCAL, KEPT) and x.span), key=lambda x: x.span
    )
    if not before:
        return ""
    return f" after {before[0].text} ({place_text(before[0].path, before[0].span[0], str(frame.module.path))})"


def _only_local(bound: Any) -> bool:
    """Lengths that are this rank's share on every path (a localizer's, or a share the rank's index entered) and
    never the whole ones."""
    kinds = {x.kind for x in labels_of(bound) | maybe_of(bound)}
    return (LOCAL in kinds or KEPT in kinds or {SHARE, RANK} <= kinds) and not kinds & {GLOBAL, PARAM}


def _bounded_locally(q: Question, scope: Scope, launches: list[tuple[ast.AST, Any, ast.Call]]) -> Judgement | None:
    """A launch under DCP whose global causal bound is this rank's share of the lengths: each query token's limit
    is then a position within this rank's slice, not in the whole sequence."""
    for where, _, kernel in launches:
        bound = q.pack.mla.global_bound_param
        message = (
            f"`{scope.qualname}` launches `{_entry(kernel)}` under DCP with `{bound}` set to this rank's share of the "
            f"lengths: the bound places each query token in the whole sequence, so it must be every rank's lengths "
            f"(the batch's `seq_lens`), while `seq_lens` gets this rank's share ({_localizers(q)})"
        )
        return q.judgement("SG203", scope, where, message)
    return None


def _refuses_speculation(q: Question, scope: Scope) -> bool:
    """Whether the scope's class's constructor refuses DCP together with speculative decoding (`if dcp_enabled and
    get_spec().speculative_algorithm is not None: raise ValueError(...)`): its instances never run a target verify's
    or a draft extend's query under DCP, whatever they do without speculation."""
    hooks = partial(_Locality, q, speculative=True)
    return bool(q.pack.dcp.speculative_tests) and constructor_refuses(q, scope, hooks, "DCP with speculation")


def _plan_form(mla: Mla, positional: int, keywords: set[str]) -> tuple[str, list[str]] | None:
    """A plan call by its form: the lengths' parameter and the form's positional order. The page-table form (its
    keywords, no positional argument), the compiled module's (exactly its positional arguments), the wrapper's
    (each of its parameters given); None: another method of that name."""
    if mla.plan_table_params and not positional and keywords >= set(mla.plan_table_params):
        return mla.plan_table_lens_param or "", []
    if mla.plan_module_params and not keywords and positional == len(mla.plan_module_params):
        return mla.plan_module_lens_param or "", list(mla.plan_module_params)
    if mla.plan_params and set(mla.plan_params[:positional]) | keywords >= set(mla.plan_params):
        return mla.plan_lens_param or "", list(mla.plan_params)
    return None


def _called(q: Question, kernel: ast.Call) -> str:
    """The call as a message names it: a planning call by the end of its dotted name the pack gives, else the
    entry or plan method."""
    path = called_as(kernel, q.pack.mla.planning_call_lens)
    return ".".join(path) if path is not None else _entry(kernel)


def _planning_keyword(mla: Mla, node: ast.Call) -> str | None:
    """The keyword carrying the lengths where the call is one of the pack's `planning_calls`."""
    path = called_as(node, mla.planning_call_lens)
    return mla.planning_call_lens[path] if path is not None else None


def _lens_param(q: Question, kernel: ast.Call) -> str:
    """The lengths' parameter of the call: the entry's, a planning call's keyword, or a plan's in the form it is
    called in."""
    mla = q.pack.mla
    handed = _planning_keyword(mla, kernel)
    if handed is not None:
        return handed
    if _entry(kernel) in mla.launch_forms:
        return mla.launch_forms[_entry(kernel)].lens
    if _entry(kernel) not in mla.plan_methods:
        return mla.lens_param or ""
    form = _plan_form(mla, len(kernel.args), {kw.arg for kw in kernel.keywords if kw.arg})
    return form[0] if form is not None else mla.plan_lens_param or ""


def _entry(kernel: ast.Call) -> str:
    return kernel.func.attr if isinstance(kernel.func, ast.Attribute) else ast.unparse(kernel.func)


def _compared(scope: Scope, count: str) -> ast.Compare | None:
    """A comparison in the judged function of the count a query was viewed with (`if n > 1: raise ...`)."""
    for node in walked(scope.node):
        if isinstance(node, ast.Compare) and count in {ast.unparse(x) for x in (node.left, *node.comparators)}:
            return node
    return None


def _handed(q: Question, scope: Scope, hooks: _Locality) -> Judgement | None:
    """A launch handed lengths, or a query, that are the judged method's parameter, unchanged in what they are:
    the method is run again with what each method of its class (the framework's base classes included) that calls
    it on `self` hands it."""
    passed = [(where, lens) for where, lens, _, _ in hooks.sites if _passed_on(lens)] + hooks.open_queries
    if not passed:
        return _asked_by_callers(q, scope) if hooks.unasked else None
    where = passed[0][0]
    params = sorted({x.text for _, value in passed for x in labels_of(value) | maybe_of(value) if x.kind == PARAM})
    what = f"whether what it is handed as {' and '.join(f'`{p}`' for p in params)} is safe under DCP"
    admitted = _admitted_whole(q, scope, hooks, params)
    if admitted is not None:
        return admitted
    if any(_calls(q, other, scope) for other in q.scopes):
        return None  # a helper of this file's other functions: they are judged with what they hand it
    callers = list(_callers(q, scope))
    if not callers:
        why = (
            "it is its parameter and nothing in its file, its class or their bases calls it: its callers are not known"
        )
        return q.undecided("SG203", scope, where, what, why)
    others = []
    for klass, function in callers:
        caller = f"`{klass.name}.{function.node.name}`"
        for handed, asked, how in _handed_by(q, scope, klass, function):
            if _read_in_reported_caller(q, function, handed):
                continue  # the caller's own finding: the whole lengths are its read, handed on here unchanged
            verdict = _given_verdict(q, scope, handed, asked, how=f" as {caller} calls it{how}")
            if verdict is not None and verdict.decided:
                return verdict
            if any(_params(handed.get(p)) for p in params):
                others.append(f"{caller} passes its own parameter")
    if others:
        why = f"it is its parameter, and {others[0]}: what it is is decided by callers further up"
        return q.undecided("SG203", scope, where, what, why)
    return None


def _read_in_reported_caller(q: Question, function: Function, handed: dict[str, Any]) -> bool:
    """Whether every read of the whole lengths `function` hands on lies in this file (its own text, or what its
    class keeps), and `function` is a function of this file reported when judged on its own (its launch through
    its own class's method): the finding is the caller's, not the override's it hands them on to unchanged."""
    own = next((s for s in q.scopes if s.node is function.node), None)
    reads = [x for value in handed.values() for x in _global(value)]
    if own is None or not reads or not all(x.path == str(own.module.path) for x in reads):
        return False
    return any(j.decided for j in _judged(q, own))


def _asked_by_callers(q: Question, scope: Scope) -> Judgement | None:
    """A launch of a query of several tokens per request in a method that never asks whether DCP is on: judged as
    each method of its class (or a base) that calls it on `self` once it has asked runs it (`if not dcp_enabled:
    return super().forward_extend(...)`, then `return self._dcp_spec_forward(query, ...)`). Where none does, the
    launch is not in code that runs under DCP, and not the rule's question."""
    for klass, function in _callers(q, scope):
        for handed, asked, how in _handed_by(q, scope, klass, function):
            if asked:
                caller = f"`{klass.name}.{function.node.name}`"
                verdict = _given_verdict(q, scope, handed, asked, how=f" as {caller} calls it{how}")
                if verdict is not None and verdict.decided:
                    return verdict
    return None


def _admitted_whole(q: Question, scope: Scope, hooks: _Locality, params: list[str]) -> Judgement | None:
    """The verdict with the parameters the function's own code treats as the whole lengths (handed to a localizer,
    `get_dcp_lens(seq_lens, ...)`, or stored as them, `metadata.global_seq_lens_k = seq_lens`, here or in a helper
    it calls) taken for what it says they are, where that decides."""
    whole = {}
    for param in params:
        said = hooks.admitted.get(param)
        if said is not None:
            node, path = said
            read = Label(GLOBAL, f"`{param}`, the whole lengths by its own `{_said(node)}`", span(node), path)
            whole[param] = Abstract(frozenset({read}), exists=True)
    if not whole:
        return None
    verdict = _given_verdict(q, scope, whole, hooks.dcp_tested)
    return verdict if verdict is not None and verdict.decided else None


def _given_verdict(q: Question, scope: Scope, given: dict[str, Any], asked: bool, how: str = "") -> Judgement | None:
    """The verdict on the judged function run again with `given` for those parameters, and DCP asked already where
    `asked` (by a caller, or by the first run): on its paths joined, and path by path where a launch may get the
    whole lengths on one and this rank's on another (a parameter localized on one path only)."""

    def run(choices: Choices) -> _Locality:
        again = _Locality(q)
        again.dcp_tested = asked
        _evaluation(q, scope.function, q.self_value(scope), again, choices, given=given)
        return again

    noted = Choices(frozenset({GLOBAL, LOCAL}))
    joined = run(noted)
    verdict = _verdict(q, scope, joined.sites, how=how) or _unbounded(q, scope, joined.unbounded, how=how)
    if (verdict is not None and verdict.decided) or not _doubtful(joined.sites):
        return verdict
    for path in each_path(lambda choices: run(choices).sites, noted) or []:
        found = _verdict(q, scope, path.result, path, how)
        if found is not None and found.decided:
            return found
    return verdict


def _said(node: ast.AST) -> str:
    """The call or store that says a parameter is the whole lengths, as a message quotes it."""
    text = ast.unparse(node.func if isinstance(node, ast.Call) else node)
    return text if len(text) <= 60 else text[:57] + "..."


def _handed_by(
    q: Question, scope: Scope, klass: ClassInfo, function: Function
) -> Iterator[tuple[dict[str, Any], bool, str]]:
    """What `function` (a method of the judged method's class or a base, calling it on `self`) hands the judged
    method, with whether DCP was asked by then: as it runs on its own, and, where it hands on its own parameters,
    as each method of a class of its module that holds an instance of `klass` calls it (SGLang's FlashInfer MLA
    backend calling `self.indices_updater_decode.update(forward_batch.seq_lens, ...)`, which hands them on to
    the `call_begin_forward` a fork overrides)."""
    found = _Locality(q, into=scope.node)
    _evaluation(q, function, q.self_value(scope), found, Choices(frozenset()))
    for handed, asked in found.handed:
        yield handed, asked, ""
        if not any(_params(value) for value in handed.values()):
            continue
        for holder, method, spelled in _holders(q, klass, function.node.name):
            up = _Locality(q, into=function.node)
            up.spelled = (spelled, function)
            _evaluation(q, method, Obj(holder, label="self"), up, Choices(frozenset()))
            for given, asked_up in up.handed:
                again = _Locality(q, into=scope.node)
                again.dcp_tested = asked_up
                _evaluation(q, function, q.self_value(scope), again, Choices(frozenset()), given=given)
                for handed_on, asked_on in again.handed:
                    yield handed_on, asked_on, f" from `{holder.name}.{method.node.name}`"


def _holders(q: Question, klass: ClassInfo, name: str) -> Iterator[tuple[ClassInfo, Function, frozenset[str]]]:
    """The methods of the classes of `klass`'s module that call its method `name` on an attribute holding an
    instance of it (`self.updater = Updater(...)` in one method, `self.updater.update(...)` in another), with
    that call's spelling (by reading)."""
    module = q.program.module(klass.module)
    if module is None:
        return
    for holder in module.classes.values():
        if holder is klass:
            continue
        held = {
            f"self.{target.attr}.{name}"
            for node in holder.methods.values()
            for stmt in walked(node)
            if isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id == klass.name
            for target in stmt.targets
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        }
        if not held:
            continue
        calls = words(frozenset(held))
        for node in holder.methods.values():
            if calls.search(definition_text(module, node)):
                yield holder, Function(module, node, holder), frozenset(held)


def _calls(q: Question, other: Scope, scope: Scope) -> bool:
    """Whether another function of the file calls the judged one: by name, or a method of its class or of a
    subclass on `self`."""
    if other is scope:
        return False
    if not scope.bound:
        return words({scope.node.name}).search(other.text) is not None
    related = other.cls is not None and scope.cls in q.program.ancestors(other.cls)
    return related and words({f"self.{scope.node.name}"}).search(other.text) is not None


def _passed_on(lens: Any) -> bool:
    """Lengths that are a parameter of the judged function on some path, not read as the whole ones (this rank's
    share on another path leaves the parameter's own path to what it is)."""
    kinds = {x.kind for x in labels_of(lens) | maybe_of(lens)}
    return PARAM in kinds and GLOBAL not in kinds


def _params(value: Any) -> frozenset[Label]:
    return frozenset(x for x in labels_of(value) if x.kind == PARAM)


def _callers(q: Question, scope: Scope) -> Iterator[tuple[ClassInfo, Function]]:
    """The methods of the judged method's class and its bases that call it on `self` (by reading)."""
    if scope.cls is None or not scope.bound:
        return
    calls = words({f"self.{scope.node.name}"})
    for klass in q.program.ancestors(scope.cls):
        module = q.program.module(klass.module)
        if module is None:
            continue
        for name, node in klass.methods.items():
            if name != scope.node.name and calls.search(definition_text(module, node)):
                yield klass, Function(module, node, klass)


def _doubtful(sites: list[Site]) -> bool:
    """Whether some launch may get every rank's lengths on some path and this rank's on another."""
    return any(x.kind == GLOBAL for _, lens, _, _ in sites for x in labels_of(lens) | maybe_of(lens))


def _verdict(q: Question, scope: Scope, sites: list[Site], path: Path | None = None, how: str = "") -> Judgement | None:
    on = (f" on the path where {path.describe(str(scope.module.path))}" if path is not None else "") + how
    home = str(scope.module.path)
    for where, lens, kernel, chain in sites:
        read = _global(lens)
        if not read or _callees(q, scope, read, (*chain, kernel)):
            continue
        sources = ", ".join(f"{x.text} ({place_text(x.path, x.span[0], home)})" for x in read)
        if isinstance(kernel, ast.Attribute) and all(x.kind == TWICE for x in read):
            message = (
                f"`{scope.qualname}` leaves lengths localized twice ({sources}) in `.{kernel.attr}` under DCP{on}, "
                "which the decode launches with as this rank's lengths: they were this rank's share already, and a "
                "share of that is no rank's length; localize the whole lengths once"
            )
        elif isinstance(kernel, ast.Attribute):  # a launch-read field left holding the lengths (`_left_whole`)
            message = (
                f"`{scope.qualname}` leaves the whole sequence's lengths ({sources}) in `.{kernel.attr}` under "
                f"DCP{on}, which the decode launches with as this rank's lengths: store this rank's share there "
                f"({_localizers(q)}), and the whole lengths in `{_global_field(q)}`"
            )
        elif all(x.kind == TWICE for x in read):
            message = (
                f"`{scope.qualname}` hands `{_called(q, kernel)}` lengths localized twice as "
                f"`{_lens_param(q, kernel)}` ({sources}) under DCP{on}: they were this rank's share already, and a "
                "share of that is no rank's length; localize the whole lengths once"
            )
        else:
            message = (
                f"`{scope.qualname}` hands `{_called(q, kernel)}` the whole sequence's lengths as "
                f"`{_lens_param(q, kernel)}` ({sources}) under DCP{on}, where this rank's KV cache holds only its "
                f"share of each request: hand it this rank's share ({_localizers(q)}) and a page table of this "
                "rank's pages"
            )
        return q.judgement("SG203", scope, where, message)
    return None


def _callees(q: Question, scope: Scope, read: list[Label], chain: tuple[ast.AST, ...]) -> bool:
    """Whether the launch is reached through another function of this file in which every read of the whole lengths
    it gets lies, and which reports a launch when judged on its own: the finding is that function's (a caller
    delegating to an override that launches wrongly is not wrong itself)."""
    home = str(scope.module.path)
    for other in q.scopes:
        lines = range(other.node.lineno, (other.node.end_lineno or 0) + 1)
        if other is scope or not all(x.path == home and x.span[0] in lines for x in read):
            continue
        inside = {id(n) for n in walked(other.node) if isinstance(n, ast.Call)}
        if any(id(call) in inside for call in chain[1:]) and any(j.decided for j in _judged(q, other)):
            return True
    return False


def _package_root(q: Question) -> PurePath | None:
    """The folder of the judged module's top package (None for a module outside any)."""
    found = q.program.file_of(q.module.name.partition(".")[0])
    return found[0].parent if found is not None and found[1] else None


def _global_field(q: Question) -> str:
    return f".{q.pack.dcp.global_lens[0]}" if q.pack.dcp.global_lens else "a field of their own"


def _localizers(q: Question) -> str:
    return " or ".join(f"`{name}(...)`" for name in q.pack.dcp.localizers[:2]) or "the rank-local lengths"


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in report_judgements("SG203", ctx):
        yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)


def _names_dcp(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    """A file that asks whether DCP is on, how many ranks it has, launches with the entry's DCP switch, overrides
    or calls a method the framework calls only with DCP on, or names a field the launch reads as this rank's
    lengths (a CUDA-graph replay shortcut that fills `metadata.seq_lens_k` itself) or what a planning call is
    called on."""
    return any(name in mentions for name in (*_asking_dcp(pack), *pack.dcp.local_lens, *pack.mla.planning_call_holders))


RULE = Rule(
    code="SG203",
    name="dcp-global-lens",
    title="MLA decode under DCP handed every rank's lengths beside this rank's pages",
    summary=(
        "Flags a launch of the MLA decode entry (`trtllm_batch_decode_with_kv_cache_mla`, reached through the "
        "backend's own helpers, or a kernel the pack names by its signature: FlashMLA's `flash_mla_with_kvcache` "
        "and the schedule `get_mla_metadata` it reads), or a plan of FlashInfer's MLA wrapper, that with DCP on "
        "gets the lengths of the whole sequence (the batch's `seq_lens`, a metadata's `global_seq_lens_k`, or "
        "anything computed from them) on some path, where this rank's KV cache holds only its share of each "
        "request; and a launch, in code that asks whether DCP is on, of a query with more than one token per "
        "request (target verify, draft extend) without the global causal bound `causal_seqlens_kv_global` and "
        "without refusing it, or with that bound set to this rank's share of the lengths. Lengths localized "
        "twice (a localizer handed what was this rank's share already, such as what is read from the field the "
        "launches read as this rank's lengths, `metadata.seq_lens_k`, where the object's `global_seq_lens_k` is "
        "set) are as wrong as the whole ones, at a launch or left in that field."
    ),
    analysis=(
        "The rule evaluates each function that reaches the entry (directly, or through a method or function of "
        "the tree, a base class's `_run_decode_kernel` in the framework's own source included) or a plan method "
        "of FlashInfer's MLA wrapper (`[mla] plan_methods` given each of `plan_params`, its lengths "
        "`plan_lens_param`, or by keyword each of its page-table form's `plan_table_params`, its lengths "
        "`plan_table_lens_param`, or exactly its compiled module's `plan_module_params`, which a framework's own "
        "fast plan calls, its lengths `plan_module_lens_param`, or one metadata object by the keyword "
        "`plan_metadata_param`, its lengths that object's `plan_metadata_lens`, as FlashInfer's code or, where it "
        "is not read, the pack's `plan_metadata_builders` fill them; a plan bound with `functools.partial` is "
        "called with what the partial bound first), or one of the pack's `planning_calls`, a framework's call that "
        "plans with the lengths it is handed under a keyword (SGLang's FlashInfer MLA decode updater, "
        "`self.indices_updater_decode.update(..., **self.fast_decode_kwargs)`, whose CUDA-graph replay plans "
        "`kv_len_arr_cpu` as handed; keywords the instance keeps in a dict its methods fill are followed), and "
        "reads DCP lengths or tests DCP, with DCP on over two "
        "ranks: the pack's "
        "`[dcp] enabled_tests` (`get_parallel().dcp_enabled`) answer true and its `sizes` two (a size the "
        "constructor reads and keeps on the instance too). A method of a class whose constructor raises on every "
        "path then, by its own statements, is not judged: no instance of it runs under DCP.",
        "Lengths carry where they come from as a property of the value: a field of the pack's `global_lens` "
        "(on any object) or `batch_global_lens` (on a batch: a parameter typed or named as one, or one kept on "
        "the instance) holds the whole sequence's lengths; a call of the pack's `localizers` "
        "(`get_dcp_lens(lens, size, rank)`) gives this rank's share, and one of its `in_place_localizers` "
        "rewrites the lengths it is handed into it (that tensor, under every name that holds it: a helper's "
        "parameter and its caller's variable), unless it is handed one rank (`get_dcp_lens(lens, 1, 0)` hands "
        "`lens` back); lengths divided by the number of ranks (`//`, `torch.div`) are this rank's share where "
        "the rank's index (`[dcp] ranks`) enters too (`lens // size + (rank < lens % size)`), never a share "
        "every rank computes alike (`(lens + size - 1) // size`); slices, `.to(...)` and other methods of the "
        "lengths keep what they are; what is copied into a buffer's rows (`buf[:bs].copy_(lens)`) is what the "
        "buffer holds. Helpers of the tree and of the framework, properties, `functools.partial` kernels and "
        "what the instance's other methods keep on it are followed (an instance of a class of the analyzed "
        "package's own that its constructor keeps from a parameter annotated so, `backend: VendorDcpBackend`, is "
        "one of that class, whose methods run; a setting its constructor chooses is what the "
        "constructor that runs leaves, a subclass's `__init__` over its base's; a frozen settings record whose "
        "class builds it in class methods, `DcpSettings.from_server_args(server_args)`, is what those read, its "
        "properties run on it; a `functools.partial` of a helper that launches is one of the launches), so "
        "lengths read in one place and "
        "launched in another are compared. Where lengths read on one path meet others, each path through the "
        f"tests that choose them is evaluated on its own, up to {MAX_PATHS} paths, and the finding names the "
        "path; more is listed as not decided.",
        "Lengths the judged function was handed as a parameter, passed on unchanged in whose they are, are its "
        "callers': where other functions of its file call it, they are judged with what they hand it; otherwise "
        "the methods of its class and their bases (the framework's included) that call it on `self` are "
        "evaluated, and the whole lengths passed by one are a finding, unless they are that caller's own finding "
        "(read in this file by it or its class, and the caller reported when judged itself). Where one passes "
        "its own parameter, the "
        "methods of the classes of that caller's module that hold an instance of its class (`self.updater = "
        "Updater(...)`) and call it there (`self.updater.update(forward_batch.seq_lens, ...)`) are evaluated "
        "too, and what they hand it is handed on. A parameter the function's own code treats as the whole lengths, "
        "handing it to a localizer or storing it in a `global_lens` field (`metadata.global_seq_lens_k.copy_("
        "seq_lens)`), itself or in a helper it calls, is judged as them. Where that still leaves a parameter, or "
        "nothing calls it, the launch is listed as not decided. A launch reached through another function of the "
        "file that reads the whole lengths and launches with them itself is that function's finding, not its "
        "callers'; so is one reached in code beside the analyzed package (the framework's method an override "
        "hands the batch to, `super().init_forward_metadata(batch)`), where that code both reads the lengths and "
        "launches: its finding is made where it is checked. A method that launches a query of several tokens "
        "per request without the bound and never asks "
        "whether DCP is on is judged as those methods run it once they have asked (a base's `forward_extend` that "
        "sends DCP's draft extend to a hook a subclass overrides). A class whose constructor refuses DCP together "
        "with speculative decoding (the pack's `speculative_tests`) runs no such query under DCP. A mixin's "
        "method (its class has no base, and it calls methods of `self` it does not define) runs on the one class "
        "of its module that mixes it in.",
        "A field the framework's launch reads as this rank's lengths (the pack's `[dcp] local_lens`: "
        "`metadata.seq_lens_k`) is a launch too: a function that asks whether DCP is on (or is one of the pack's "
        "`gated_methods`, which the framework calls only with DCP on) and stores there, by assignment or "
        "`.copy_(...)`, or builds an object with it as a keyword and hands that out (`Metadata(seq_lens_k=lens)`, "
        "`dataclasses.replace(metadata, seq_lens_k=lens)`, returned or stored), is judged by what the field holds "
        "at each of its ends, path by path where paths met. A "
        "file that names such a field is read, though it never asks about DCP itself (a fork's CUDA-graph replay "
        "shortcut that fills `metadata.seq_lens_k` before SGLang's own DCP step would); a function of such a file "
        "is judged only where its evaluation asks (the framework's method it falls back to, say). An element of a "
        "container the instance holds, read by a key the code names (`self.decode_cuda_graph_metadata[bs]`), is "
        "one object wherever the function reads it so.",
        "A query has more than one token per request where it is viewed as `[requests, tokens, heads, dim]` "
        "(`q.view(bs, draft_token_num, heads, dim)`) with a token count other than one (`-1`, as many as it holds, "
        "is SGLang's target verify's), or made so (`torch.zeros((bs, max_q, heads, dim))`), or is launched flat "
        "with its offsets (the pack's `[mla] varlen_query_param`, `cum_seq_lens_q=`) and a width (`[mla] "
        "varlen_width_param`, `max_q_len=`) not known to be one; the evaluation then "
        f"takes {QUERY_TOKENS} tokens per request, so that a refusal written on the query's shape "
        "(`q_len = query.shape[1] if query.dim() == 4 else 1`, `if dcp and q_len > 1: raise`) ends the path as "
        "it would. A launch of such a query under DCP without the entry's global bound (the pack's "
        "`global_bound_param`) is a finding where the code asked whether DCP is on or how many ranks it has, or "
        "the launch is handed the entry's DCP switch as true (`[mla] dcp_flag_param`, `enable_dcp=True`); one "
        "whose token count (or ragged width) the function compares before (a refusal on the count) is listed as "
        "not decided, "
        "since a comparison does not narrow a count in the evaluation.",
        "Kernels the pack names by signature in `[mla] launches` (`flash_mla_with_kvcache(q: query, k_cache, "
        "block_table, cache_seqlens: lens, ..., indices: sparse)`) are launches too, their positions bound by that "
        "signature where the tree does not hold their code: the parameter marked `lens` must be this rank's share, "
        "one marked `query` is judged as the entry's query, and none takes a global causal bound; a call handed the "
        "parameter marked `sparse` (DSA's top-k `indices`) reads the KV at the indices given and is not judged. In "
        "the pack's `[dcp] decode_methods` (SGLang's `forward_decode`, which the framework calls for one token per "
        "request only), and on a path that passed one of its `[dcp] decode_tests` (`assert "
        "forward_batch.forward_mode.is_decode_or_idle()`), a query viewed with `-1` tokens per request has one.",
    ),
    why=(
        "Under decode context parallelism each rank holds an interleaved slice of every request's KV cache, so "
        "the page table it decodes with must list only its own pages and the lengths only its share. The decode "
        "kernel walks `seq_lens[i]` tokens of request i through that table: with the whole sequence's length it "
        "reads past this rank's share (pages the table does not hold, or another request's), and the softmax "
        "statistics the ranks merge are wrong, silently. With more than one query token per request, each "
        "token's causal limit differs, and only a global bound lets the kernel place it within this rank's "
        "interleaved slice: the rank-local lengths alone let every token see as far as the last one."
    ),
    bad="""
        import functools

        import flashinfer
        import torch
        from sgl_kernel.flash_mla import flash_mla_with_kvcache
        from sglang.srt.runtime_context import get_parallel

        class DcpDecodeBackend:
            def forward_decode(self, q, kv_cache, layer, forward_batch):
                metadata = forward_batch.decode_trtllm_mla_metadata
                if get_parallel().dcp_enabled:
                    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(  # SG203
                        query=q, kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
                        seq_lens=forward_batch.seq_lens.to(torch.int32), max_seq_len=metadata.max_seq_len_k,
                        return_lse=True,
                    )

            def _decode_with(self, q, kv_cache, metadata):  # its metadata is handed in: its whole lengths are whole
                if get_parallel().dcp_enabled:
                    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(  # SG203
                        query=q, kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
                        seq_lens=metadata.global_seq_lens_k, max_seq_len=metadata.max_seq_len_k,
                        return_lse=True,
                    )

            def plan_table(self, forward_batch, block_tables):  # FlashInfer's page-table form plans with them too
                if get_parallel().dcp_enabled:
                    self.decode_wrapper.plan(  # SG203
                        cum_seq_lens_q=self.q_indptr, block_tables=block_tables, seq_lens=forward_batch.seq_lens,
                        num_heads=16, head_dim_ckv=512, head_dim_kpe=64, page_size=1, causal=False, sm_scale=1.0,
                        q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                    )

        class BoundKernelBackend:  # the entry bound once with `partial`, launched from another method
            def __init__(self, workspace):
                self._decode = functools.partial(
                    flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla, workspace_buffer=workspace
                )

            def decode_step(self, q, kv_cache, forward_batch):
                if get_parallel().dcp_enabled:
                    return self._decode(  # SG203
                        query=q, kv_cache=kv_cache, block_tables=forward_batch.block_kv_indices,
                        seq_lens=forward_batch.seq_lens, return_lse=True,
                    )

        class FlashMLADcpBackend:  # a kernel the pack names by its signature (`[mla] launches`)
            def forward_decode(self, q, k_cache, layer, forward_batch):
                bs, md = forward_batch.batch_size, self.forward_metadata
                o, lse = flash_mla_with_kvcache(  # SG203
                    q.view(bs, -1, layer.tp_q_head_num, layer.head_dim), k_cache, md.block_kv_indices,
                    forward_batch.seq_lens.to(torch.int32), 512, md.flashmla_metadata, md.num_splits,
                )
                return (o, lse) if get_parallel().dcp_enabled else o

            def forward_extend(self, q, k_cache, layer, forward_batch):  # a verify's query: FlashMLA takes no bound
                bs, md = forward_batch.batch_size, self.forward_metadata
                if get_parallel().dcp_enabled:
                    return flash_mla_with_kvcache(  # SG203
                        q=q.view(bs, self.num_draft_tokens, layer.tp_q_head_num, layer.head_dim), k_cache=k_cache,
                        block_table=md.block_kv_indices, cache_seqlens=md.seq_lens_k, head_dim_v=512,
                        tile_scheduler_metadata=md.flashmla_metadata, num_splits=md.num_splits, causal=True,
                    )
    """,
    good="""
        import flashinfer
        import torch
        from sgl_kernel.flash_mla import flash_mla_with_kvcache
        from sglang.srt.layers.dcp.layout import get_dcp_lens, update_local_kv_lens_for_dcp
        from sglang.srt.runtime_context import get_parallel

        class DcpDecodeBackend:
            def forward_decode(self, q, kv_cache, layer, forward_batch):
                metadata = forward_batch.decode_trtllm_mla_metadata
                if get_parallel().dcp_enabled:
                    parallel = get_parallel()
                    local = get_dcp_lens(forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank)
                    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                        query=q, kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
                        seq_lens=local.to(torch.int32), max_seq_len=metadata.max_seq_len_k,
                        return_lse=True,
                    )

            def plan_csr(self, forward_batch, kv_indptr, kv_indices):  # local offsets and pages handed in
                kv_len_arr = forward_batch.seq_lens.to(torch.int32)
                if get_parallel().dcp_enabled:
                    _to_this_rank(kv_len_arr)  # that very tensor is this rank's share now
                self.decode_wrapper.plan(
                    self.q_indptr, kv_indptr, kv_indices, kv_len_arr, 16, 512, 64, 1, False, 1.0, torch.bfloat16,
                    torch.bfloat16,
                )

        def _to_this_rank(lens):
            update_local_kv_lens_for_dcp(lens)

        class FlashMLADcpBackend:
            def forward_decode(self, q, k_cache, layer, forward_batch):  # `-1` tokens in a decode: one each
                bs, md, parallel = forward_batch.batch_size, self.forward_metadata, get_parallel()
                local = get_dcp_lens(forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank)
                o, lse = flash_mla_with_kvcache(
                    q.view(bs, -1, layer.tp_q_head_num, layer.head_dim), k_cache, md.block_kv_indices,
                    local.to(torch.int32), 512, md.flashmla_metadata, md.num_splits,
                )
                return (o, lse) if parallel.dcp_enabled else o

            def forward_extend(self, q, k_cache, layer, forward_batch, topk_indices):  # DSA's sparse form
                md = self.forward_metadata
                if get_parallel().dcp_enabled:
                    return flash_mla_with_kvcache(
                        q=q, k_cache=k_cache, block_table=None, cache_seqlens=forward_batch.seq_lens, head_dim_v=512,
                        tile_scheduler_metadata=md.flashmla_metadata, indices=topk_indices,
                    )
    """,
    check=check,
    applies=_names_dcp,
    judge=judge,
    framework="sglang",
    limits=(
        Limit(
            "Lengths the evaluation cannot trace to a read (a metadata field another method of the backend wrote, "
            "on an object the judged function did not build) are not known to be every rank's, so handing them "
            "on is not flagged.",
            missed="""
                import flashinfer
                from sglang.srt.runtime_context import get_parallel

                class DcpDecodeBackend:
                    def init_forward_metadata(self, forward_batch):
                        forward_batch.decode_lens = forward_batch.seq_lens

                    def forward_decode(self, q, kv_cache, layer, forward_batch):
                        if get_parallel().dcp_enabled:
                            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                                query=q, kv_cache=kv_cache, block_tables=forward_batch.block_kv_indices,
                                seq_lens=forward_batch.decode_lens, return_lse=True,
                            )
            """,
        ),
        Limit(
            "A multi-token query is known by its view as `[requests, tokens, heads, dim]` with a token count other "
            "than one; one flattened to a row per token (`[requests * tokens, 1, heads, dim]`) beside lengths "
            "expanded per row is a question of row geometry (SG202's), which SG203 does not ask: rows whose "
            "per-row bound is missing are not flagged.",
            missed="""
                import flashinfer
                from sglang.srt.runtime_context import get_parallel

                class DcpRowsBackend:
                    def forward_extend(self, q, kv_cache, layer, metadata, bs, draft_token_num):
                        if get_parallel().dcp_enabled:
                            rows = q.view(bs * draft_token_num, 1, layer.tp_q_head_num, layer.head_dim)
                            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                                query=rows, kv_cache=kv_cache,
                                block_tables=metadata.block_kv_indices.repeat_interleave(draft_token_num, dim=0),
                                seq_lens=metadata.seq_lens_k.repeat_interleave(draft_token_num), return_lse=True,
                            )
            """,
        ),
    ),
    references=(
        "sgl-project/sglang#33926, #39737 and #31785: DCP decode and speculative verify on the MLA backends, where "
        "the rank-local lengths (`TRTLLMMLABackend._get_dcp_local_seq_lens`, `get_dcp_lens`) go beside the "
        "rank-local page table (`_fill_dcp_block_kv_indices`) and the global ones only as the causal bound.",
        "sgl-project/sglang#39970 and #37735: FlashMLA under DCP receives the whole lengths and page table (SGLang "
        "0.5.18 and 0.5.23, where only its FP8 branch refuses DCP).",
    ),
)

"""Rule packs: the framework names the rules match, as validated data (rules/*.toml).

The built-in packs (vLLM's, then SGLang's laid over it) ship inside the wheel as `specguard._packs`; a fork's pack
overlays them section by section:
lists extend (or replace, with `replace = true` in the section), strings override. The schema is plain frozen
dataclasses that pydantic validates (strictly: unknown keys are errors), so that a validated pack can be reused
from the snapshot cache without importing pydantic (see _snapshots.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from specguard._files import DATA_CAP, UnreadableFile, read_regular
from specguard._snapshots import validated
from specguard._toml import load_toml, parse_toml
from specguard.errors import UserError

BUILTIN_PACKS = ("vllm.toml", "sglang.toml")  # laid over each other in this order
BASE_PACK = "vllm"  # laid under every other: its FlashInfer and MLA names are the other frameworks' too
FRAMEWORK_PACKS = tuple(name.removesuffix(".toml") for name in BUILTIN_PACKS)
# Keys a pack may leave empty.
_OPTIONAL = frozenset(
    {"replace", "description", "descriptor_params", "query_offsets", "query_requests", "query_width", "mode_enum"}
    | {"padded_producers", "padded_names", "dp_rank_counts", "builder_methods", "file_marks"}
    | {"target_batch_types", "target_batch_params", "padded_fields", "capacities", "observer_decorators"}
    | {"batch_types", "batch_params", "dp_tests", "dp_sizes", "dp_field", "token_field", "model_forwards"}
    | {"skip_keywords", "replan_keywords", "replan_when", "plan_helpers", "pad_calls", "forwards_after_padding"}
    | {"replan_always_when", "replan_always_forwards", "copied_fields"}
    | {"dcp_flag_param", "gated_methods", "local_lens", "speculative_tests", "varlen_width_param", "decode_methods"}
    | {"decode_tests"}
    | {"plan_metadata_param", "plan_metadata_lens", "plan_metadata_builders", "planning_calls", "launches"}
)
_STRICT = {"extra": "forbid"}  # pydantic reads this off each dataclass


@dataclass(frozen=True)
class _Section:
    __pydantic_config__ = _STRICT
    replace: bool = False  # in an overlay pack: replace this section's lists instead of extending them


@dataclass(frozen=True)
class PackInfo(_Section):
    name: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Speculators(_Section):
    bases: list[str] = field(default_factory=list)
    shared_helpers: list[str] = field(default_factory=list)
    # text a file defining a speculator holds (optional): the prefilter reads such a file whatever else it names
    file_marks: list[str] = field(default_factory=list)
    # methods of the speculator interface that capture CUDA graphs on dummy batches (optional; SG104): what they
    # prepare is the dummy batch's, not a copy of the shared helper's preparation
    capture_methods: list[str] = field(default_factory=list)
    # decorators that leave what a method returns as it is (optional; SG102): an override of a shared helper
    # under one (`@torch.inference_mode()`) may still only observe the helper
    observer_decorators: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Metadata(_Section):
    sink: list[str] = field(default_factory=list)
    # methods of other objects that build metadata themselves, as `Class.method` (optional; SG101)
    builder_methods: list[str] = field(default_factory=list)
    token_count_params: list[str] = field(default_factory=list)
    capture_keyword: str | None = None
    dcp_param: str | None = None


@dataclass(frozen=True)
class Padding(_Section):
    descriptor_producers: list[str] = field(default_factory=list)
    descriptor_types: list[str] = field(default_factory=list)
    descriptor_params: list[str] = field(default_factory=list)  # optional: parameters that are descriptors by name
    padded_attribute: str | None = None
    # more fields of such a descriptor that carry padding (optional): the padded request count
    padded_fields: list[str] = field(default_factory=list)
    # more sources of padded counts (optional): calls returning one, attributes or parameters holding one (or a
    # collection of them), and per-rank token counts synchronised across DP ranks, whose maximum is one
    padded_producers: list[str] = field(default_factory=list)
    padded_names: list[str] = field(default_factory=list)
    dp_rank_counts: list[str] = field(default_factory=list)
    # attributes holding a capacity, which bounds every real count (optional): the smallest of a padded count and
    # one of them is still padded, where the smallest of it and another count may be that count
    capacities: list[str] = field(default_factory=list)
    mode_attribute: str | None = None
    full_mode: str | None = None
    # the members of the mode enum a batch runs with: SG103 evaluates each metadata build once per member but FULL
    runtime_modes: list[str] = field(default_factory=list)
    # SG103's fix (optional): how the sink's and the helpers' parameters describe the query they build metadata
    # for, so that its real token count comes from the call itself, and the mode enum the fix tests
    query_offsets: list[str] = field(default_factory=list)  # host query start offsets: `int(<offsets>[<requests>])`
    query_requests: list[str] = field(default_factory=list)  # the request count those offsets are read at
    query_width: list[str] = field(default_factory=list)  # without offsets: tokens per request, `<requests> * <width>`
    mode_enum: str | None = None  # qualified name: the enum SG103 evaluates, imported where its fix needs it


@dataclass(frozen=True)
class Dcp(_Section):
    prepare: list[str] = field(default_factory=list)
    # the target model's batch (optional; SG105): lengths read from one, a parameter of these types or names,
    # are the target's, not the draft's own
    target_batch_types: list[str] = field(default_factory=list)
    target_batch_params: list[str] = field(default_factory=list)
    # what says DCP is on (optional; SG203 evaluates with it on): calls or attributes, by their last name
    enabled_tests: list[str] = field(default_factory=list)
    # what gives the number of DCP ranks (optional; SG203 evaluates with two)
    sizes: list[str] = field(default_factory=list)
    # what gives this rank's index among them (optional; SG203): lengths divided by the number of ranks are this
    # rank's share only where the index enters (`lens // size + (rank < lens % size)`); a share every rank computes
    # alike (`(lens + size - 1) // size`) is no rank's
    ranks: list[str] = field(default_factory=list)
    # calls that give this rank's share of a request's lengths or pages (SG203): what they return is rank-local
    localizers: list[str] = field(default_factory=list)
    # calls that rewrite the lengths handed as their first argument to this rank's share, in place
    in_place_localizers: list[str] = field(default_factory=list)
    # the batch's fields that hold every rank's lengths together (SG203), read on a batch as `[batches]` knows one,
    # and fields that hold them on any object (`metadata.global_seq_lens_k`)
    batch_global_lens: list[str] = field(default_factory=list)
    global_lens: list[str] = field(default_factory=list)
    # methods the framework calls only with DCP on (optional; SG203): a file that overrides or calls one is read
    # even where its own text never asks whether DCP is on
    gated_methods: list[str] = field(default_factory=list)
    # fields of a metadata object that the framework's launch reads as this rank's lengths (optional; SG203): a
    # function that asks whether DCP is on and leaves the whole lengths there is a finding (`metadata.seq_lens_k`);
    # a file that names one is read, as one that overrides a gated method is
    local_lens: list[str] = field(default_factory=list)
    # what says speculative decoding is on (optional; SG203): a class whose constructor refuses DCP together with it
    # never runs a target verify's or a draft extend's query under DCP
    speculative_tests: list[str] = field(default_factory=list)
    # a backend's methods the framework calls for one query token per request only (optional; SG203): in them a
    # query viewed with `-1` tokens per request has one, not a verify's several
    decode_methods: list[str] = field(default_factory=list)
    # tests of a batch that, where a path has them hold, say it is a decode of one query token per request
    # (optional; SG203), as `decode_methods` says of a whole method: `assert forward_mode.is_decode_or_idle()`
    decode_tests: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KvGroups(_Section):
    merge_methods: list[str] = field(default_factory=list)
    spec_class_suffixes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Mla(_Section):
    decode_entry: list[str] = field(default_factory=list)
    global_bound_param: str | None = None
    row_params: list[str] = field(default_factory=list)
    row_expanders: list[str] = field(default_factory=list)
    # the entry's lengths argument (SG203): under DCP it must be this rank's share, as its page table is
    lens_param: str | None = None
    # the entry's query argument (SG203): viewed as [requests, tokens, heads, dim] with more than one token per
    # request, it needs the global causal bound under DCP
    query_param: str | None = None
    # the entry's switch for DCP (optional; SG203): a launch that passes it true runs under DCP, whether or not the
    # code around it asked
    dcp_flag_param: str | None = None
    # the entry's ragged-query offsets (optional; SG203): a launch handed them (not None) has several query tokens
    # per request, laid out flat
    varlen_query_param: str | None = None
    # the entry's most query tokens of any request in that form (optional): a launch handed one or fewer has one per
    # request; a count the judged function compares is not decided
    varlen_width_param: str | None = None
    # FlashInfer's MLA wrapper methods that plan a decode (optional; SG203), their parameters in order (a call that
    # does not give each of them is another method of that name) and which of them is the lengths
    plan_methods: list[str] = field(default_factory=list)
    plan_params: list[str] = field(default_factory=list)
    plan_lens_param: str | None = None
    # the same methods' page-table form (optional; SG203): keywords that all say a call is of that form, and which
    # of them is the lengths
    plan_table_params: list[str] = field(default_factory=list)
    plan_table_lens_param: str | None = None
    # the wrapper's compiled module's `plan(...)`, positional (optional; SG203), which a framework's own fast plan
    # calls with the lengths (SGLang's `fast_mla_decode_plan`): a call with exactly these arguments, its lengths
    plan_module_params: list[str] = field(default_factory=list)
    plan_module_lens_param: str | None = None
    # the same methods' metadata form (optional; SG203): the keyword that hands the plan one metadata object, and
    # that object's fields that are the lengths (FlashInfer's `plan(metadata=MLAPlanMetadata.csr(...), ...)`)
    plan_metadata_param: str | None = None
    plan_metadata_lens: list[str] = field(default_factory=list)
    # that object's constructors, read this way where the library's own code is not (optional; SG203): each
    # `Class.method(field, ...)`, the fields its positional arguments fill in order (keywords fill their own)
    plan_metadata_builders: list[str] = field(default_factory=list)
    # a framework's calls that plan the wrapper with lengths they are handed, whose code the rule does not follow
    # (optional; SG203): each `name.method(keyword)`, the end of the call's dotted name and the keyword that carries
    # the lengths planned (SGLang's FlashInfer MLA decode updater, `self.indices_updater_decode.update(...,
    # init_metadata_replay=True, kv_len_arr_cpu=...)`, whose CUDA-graph replay plans them as handed)
    planning_calls: list[str] = field(default_factory=list)
    # other MLA decode launches, by signature (optional; SG203): kernels with no DCP switch or global causal bound
    # of their own (FlashMLA's `flash_mla_with_kvcache`, and `get_mla_metadata`, whose schedule the launch reads),
    # each `name(param, ...)` in positional order, `param: lens` marking the lengths (this rank's share under DCP),
    # `param: query` the query (several tokens per request under DCP need a bound these kernels cannot take) and
    # `param: sparse` an argument that, handed, makes it read the KV at given indices instead (not judged)
    launches: list[str] = field(default_factory=list)

    @cached_property
    def launch_forms(self) -> dict[str, LaunchForm]:
        """`launches` read: the kernel's name -> its parameters in order and which are the lengths and query."""
        return dict(parse_launch(text, "mla.launches") for text in self.launches)

    @cached_property
    def metadata_builders(self) -> dict[str, tuple[str, ...]]:
        """`plan_metadata_builders` read: the constructor's dotted name -> the fields its positions fill."""
        return dict(parse_signature(text, "mla.plan_metadata_builders") for text in self.plan_metadata_builders)

    @cached_property
    def planning_call_holders(self) -> tuple[str, ...]:
        """The names `planning_calls` are called on (`indices_updater_decode`): a file naming one is read."""
        return tuple(sorted({path[-2] for path in self.planning_call_lens if len(path) > 1}))

    @cached_property
    def planning_call_lens(self) -> dict[tuple[str, ...], str]:
        """`planning_calls` read: the dotted name's parts -> the keyword that carries the lengths."""
        read = {}
        for text in self.planning_calls:
            name, keywords = parse_signature(text, "mla.planning_calls")
            if len(keywords) != 1:
                raise UserError(f"rule pack key 'mla.planning_calls': {text!r} names not one keyword")
            read[tuple(name.split("."))] = keywords[0]
        return read


@dataclass(frozen=True)
class LaunchForm:
    """A kernel's parameters in positional order, and the names of its lengths and (optional) query parameters."""

    params: tuple[str, ...]
    lens: str
    query: str | None
    sparse: str | None  # handed (not None), the kernel reads the KV at the indices given, not by the lengths


_ROLE = re.compile(r"^(\w+)\s*(?::\s*(lens|query|sparse))?$")


def parse_launch(text: str, key: str) -> tuple[str, LaunchForm]:
    """`kernel(q: query, cache, seqlens: lens, indices: sparse)` -> ("kernel", its form); a UserError naming the
    pack's key and the entry where it is not one, or marks no lengths or one role twice."""
    opened = text.find("(")
    name, inner = text[:opened].strip(), text[opened + 1 :].rstrip().removesuffix(")")
    params, roles = [], {}
    parts = [part.strip() for part in inner.split(",")] if opened > 0 and text.rstrip().endswith(")") else []
    for part in parts:
        match = _ROLE.match(part)
        if match is None:
            raise UserError(f"rule pack key '{key}': {text!r} is not `name(param, param: lens, param: query, ...)`")
        params.append(match.group(1))
        if match.group(2):
            if match.group(2) in roles:
                raise UserError(f"rule pack key '{key}': {text!r} marks two parameters `: {match.group(2)}`")
            roles[match.group(2)] = match.group(1)
    if not re.fullmatch(r"[A-Za-z_][\w.]*", name) or "lens" not in roles:
        raise UserError(f"rule pack key '{key}': {text!r} is not `name(param, param: lens, param: query, ...)`")
    return name, LaunchForm(tuple(params), roles["lens"], roles.get("query"), roles.get("sparse"))


_SIGNATURE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\(\s*((?:\w+\s*,\s*)*\w*)\s*\)\s*$")


def parse_signature(text: str, key: str) -> tuple[str, tuple[str, ...]]:
    """`Class.method(a, b)` -> ("Class.method", ("a", "b")); a UserError naming the pack's key and the entry where
    it is not one."""
    match = _SIGNATURE.match(text)
    if match is None:
        raise UserError(f"rule pack key '{key}': {text!r} is not `Name.method(field, ...)`")
    return match.group(1), tuple(p.strip() for p in match.group(2).split(",") if p.strip())


@dataclass(frozen=True)
class Batches(_Section):
    """A batch object whose attention metadata is planned ahead of its forward (SG106): the calls that plan it, the
    batch's own methods that pad it, the forwards that run it, and the predicate a forward asks before planning
    again (evaluated on the batch where the tree defines it, never trusted by name)."""

    plan: list[str] = field(default_factory=list)
    pad_methods: list[str] = field(default_factory=list)
    # calls that pad the batch they are handed, where it is synchronised across DP ranks (optional): a model
    # runner's own padding step (SGLang's `model_runner._prepare_eager_forward_batch(batch)`)
    pad_calls: list[str] = field(default_factory=list)
    forwards: list[str] = field(default_factory=list)
    # those of `forwards` the framework calls after its own padding step (optional), as `forwards` names them: they
    # never pad the batch they are handed (SGLang's `EagerRunner.execute`, which `_forward_raw` calls once padded)
    forwards_after_padding: list[str] = field(default_factory=list)
    replan_predicate: str | None = None
    count_field: str | None = None
    # how a batch is recognised where nothing built it in the evaluation (optional): a parameter of these types or
    # names
    batch_types: list[str] = field(default_factory=list)
    batch_params: list[str] = field(default_factory=list)
    # tests that say whether DP attention is on, calls or flags (optional; the rule evaluates with it on), and the
    # batch's field that is set (not None) when the batch is synchronised across DP ranks: a forward pads only such
    # a batch
    dp_tests: list[str] = field(default_factory=list)
    # what gives the number of DP attention ranks, calls or fields (optional; the rule evaluates with two)
    dp_sizes: list[str] = field(default_factory=list)
    dp_field: str | None = None
    # the batch's query tokens (optional), whose first dimension padding changes too
    token_field: str | None = None
    # calls of the model itself (optional), as the end of their dotted name (`model.forward`): they never plan, so
    # the batch they run must be the one its latest plan was made for
    model_forwards: list[str] = field(default_factory=list)
    # keywords that tell a forward not to plan (optional; SGLang before the readiness mark: `skip_attn_backend_init`)
    skip_keywords: list[str] = field(default_factory=list)
    # keywords that tell a forward to plan again whatever the batch's mark (optional; `reinit_attn_backend`), and
    # the batch's predicates, dotted from the batch, of which one must hold for it to (optional; none: always)
    replan_keywords: list[str] = field(default_factory=list)
    replan_when: list[str] = field(default_factory=list)
    # the batch's predicates, dotted from the batch, under which some forwards plan the batch again whatever its mark
    # or keywords (optional; SGLang's eager runner re-plans a target verify every time), and those forwards
    # (optional; matched as `forwards` are)
    replan_always_when: list[str] = field(default_factory=list)
    replan_always_forwards: list[str] = field(default_factory=list)
    # the fields a batch made from another (`ForwardBatch.init_new(batch, runner)`) takes from it (optional)
    copied_fields: list[str] = field(default_factory=list)
    # the framework's own methods that plan the batch they are handed (optional): a file that calls one is read
    # even where its own text names no plan
    plan_helpers: list[str] = field(default_factory=list)
    # the batch's methods that mark its metadata planned (optional): a file that calls one plans somewhere, maybe only
    # through a helper of another module (`plan_and_mark`), so it is read too
    marks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pack:
    """One pack file, or the overlay of several. Every rule reads its names from here."""

    __pydantic_config__ = _STRICT
    pack: PackInfo = field(default_factory=PackInfo)
    speculators: Speculators = field(default_factory=Speculators)
    metadata: Metadata = field(default_factory=Metadata)
    padding: Padding = field(default_factory=Padding)
    dcp: Dcp = field(default_factory=Dcp)
    kv_groups: KvGroups = field(default_factory=KvGroups)
    mla: Mla = field(default_factory=Mla)
    batches: Batches = field(default_factory=Batches)

    @cached_property
    def fingerprint(self) -> str:
        """Content hash for the analysis cache: a changed name invalidates every cached result."""
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    @cached_property
    def needles(self) -> tuple[bytes, ...]:
        """Every identifier a rule can match: a file holding none of them cannot produce a finding."""
        names = [
            *self.metadata.sink,
            *self.speculators.shared_helpers,
            *self.speculators.file_marks,
            *self.dcp.prepare,
            *self.kv_groups.flags,
            *self.mla.decode_entry,
            *self.mla.launch_forms,
            *self.dcp.enabled_tests,
            *self.dcp.sizes,
            *self.dcp.gated_methods,
            *self.dcp.local_lens,
            *self.mla.planning_call_holders,
            *self.batches.plan,
            *self.batches.plan_helpers,
            *self.batches.marks,
        ]
        names += [n for n in (self.mla.global_bound_param, self.mla.dcp_flag_param, self.batches.replan_predicate) if n]
        return tuple(sorted({n.encode() for n in names if n}))

    @cached_property
    def needle_groups(self) -> tuple[tuple[bytes, ...], ...]:
        """The prefilter proper: a file can match only if it holds every needle of some group.

        A speculator rule needs one of its names; SG201 needs a flag and a merge method; SG202 the global bound
        (the MLA entry it reaches may be called in another module); SG203 an MLA launch beside a DCP size. Names
        that contain another (`_build_attn_metadata` holds `build_attn_metadata`) are left out, since the shorter
        one already admits the file.
        """
        singles = [
            *self.metadata.sink,
            *self.speculators.shared_helpers,
            *self.speculators.file_marks,
            *self.dcp.prepare,
            *self.dcp.enabled_tests,
            *self.dcp.gated_methods,
            *self.dcp.local_lens,
            *self.mla.planning_call_holders,
            *self.batches.plan,
            *self.batches.plan_helpers,
            *self.batches.marks,
            *([self.batches.replan_predicate] if self.batches.replan_predicate else []),
        ]
        groups = {(n,) for n in singles if not any(o != n and o in n for o in singles)}
        groups |= {(f, m) for f in self.kv_groups.flags for m in self.kv_groups.merge_methods}
        # SG203 judges an MLA launch in code that reads the DCP size (`self.dcp_size > 1`) or hands the entry its DCP
        # switch (`enable_dcp=...`), whatever else the file names (before, a comment naming a DCP hook could be what
        # admitted it). Not a plan method beside them: `plan` is in too many words, and that pair cost SGLang
        # 0.5.23's cold check half its time again.
        launches = [*self.mla.decode_entry, *self.mla.launch_forms]
        asking = [*self.dcp.sizes, *([self.mla.dcp_flag_param] if self.mla.dcp_flag_param else [])]
        groups |= {(launch, name) for launch in launches for name in asking}
        if self.mla.global_bound_param:  # the launch may be a base class's, in another module
            groups.add((self.mla.global_bound_param,))
        return tuple(sorted(tuple(n.encode() for n in g) for g in groups))


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in top.items():
        target = merged.setdefault(section, {})
        replace = values.get("replace", False)
        for key, value in values.items():
            if key == "replace":
                continue
            if isinstance(value, list) and not replace:
                target[key] = list(dict.fromkeys([*target.get(key, []), *value]))
            else:
                target[key] = value
    return merged


def _validate(raw: dict[str, Any], origin: str) -> Pack:
    from pydantic import TypeAdapter, ValidationError

    try:
        pack = TypeAdapter(Pack).validate_python(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        problem = "unknown key" if err["type"] in ("extra_forbidden", "unexpected_keyword_argument") else err["msg"]
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise UserError(f"{origin}: rule pack key '{key}': {problem}{more}") from None
    try:
        pack.mla.metadata_builders  # noqa: B018 - read now, so that a malformed entry names its file
        pack.mla.planning_call_lens  # noqa: B018
        pack.mla.launch_forms  # noqa: B018
    except UserError as exc:
        raise UserError(f"{origin}: {exc}") from None
    return pack


def builtin_pack_text(name: str) -> str:
    try:
        return resources.files("specguard._packs").joinpath(name).read_text(encoding="utf-8")
    except ModuleNotFoundError:  # running from a source checkout that was never installed
        return (Path(__file__).resolve().parent.parent / "rules" / name).read_text(encoding="utf-8")


def _build(builtins: list[tuple[str, str]], extra: list[Path]) -> Pack:
    raw: dict[str, Any] = {}
    for name, text in builtins:
        raw = _overlay(raw, parse_toml(text, origin=f"built-in {name}", what="rule pack"))
    # What the built-in packs read fill must stay filled (a key of a pack not read, SGLang's, may stay empty).
    required = _filled(_validate(raw, "built-in rule packs"))
    for path in extra:
        layer = load_toml(path, what="rule pack")
        if not all(isinstance(v, dict) for v in layer.values()):
            raise UserError(f"{path}: a rule pack holds only [sections] of keys")
        _validate(layer, str(path))  # name the file that is wrong, not the merged result
        raw = _overlay(raw, layer)
    pack = _validate(raw, "merged rule packs")
    filled = set(_filled(pack))
    missing = [key for key in required if key not in filled]
    if missing:
        raise UserError(f"rule packs leave required keys empty: {', '.join(missing)}")
    return pack


def _filled(pack: Pack) -> list[str]:
    """The required keys (`section.key`) a pack gives a value, in the schema's order."""
    return [
        f"{section}.{key}"
        for section, values in dataclasses.asdict(pack).items()
        for key, value in values.items()
        if value not in (None, []) and key not in _OPTIONAL
    ]


def check_builtin_packs(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The built-in packs a setting names, in the order they are laid; a UserError for an unknown one or a list
    without the base pack."""
    unknown = [n for n in names if n not in FRAMEWORK_PACKS]
    if unknown:
        known = ", ".join(FRAMEWORK_PACKS)
        raise UserError(f"builtin-packs: unknown pack {unknown[0]!r}; the built-in packs are {known}")
    if BASE_PACK not in names:
        raise UserError(f"builtin-packs must include {BASE_PACK!r}: every other built-in pack is laid over it")
    return tuple(n for n in FRAMEWORK_PACKS if n in names)


def load_pack(extra: list[Path] | tuple[Path, ...] = (), builtin: tuple[str, ...] = FRAMEWORK_PACKS) -> Pack:
    """The built-in packs named (all by default) with each extra pack laid over them in order (validated once per
    distinct text)."""
    builtins = [(f"{name}.toml", builtin_pack_text(f"{name}.toml")) for name in check_builtin_packs(builtin)]
    material = [f"{name}\0{text}".encode() for name, text in builtins]
    for path in extra:
        try:
            material.append(str(path).encode() + b"\0" + read_regular(path, DATA_CAP))
        except UnreadableFile:
            material.append(str(path).encode())  # unreadable: _build reports it
    return validated("pack", material, Pack, lambda: _build(builtins, list(extra)))


def packs_for(paths: list[Path]) -> tuple[str, ...]:
    """The built-in packs for a check of `paths` when the settings name none: the base alone where every path is
    vLLM's, SGLang's laid over it otherwise (an SGLang tree, a mixed one, or code of no known framework)."""
    return (BASE_PACK,) if paths and all(_framework_of(p) == BASE_PACK for p in paths) else FRAMEWORK_PACKS


def _framework_of(path: Path) -> str | None:
    """The one framework a path is the code of: by a package folder it is inside, else by the package folders it
    holds (a checkout: `vllm/`, SGLang's `python/sglang/`); None for neither or both."""
    parts = set(path.resolve().parts)
    found = {name for name in FRAMEWORK_PACKS if name in parts}
    if not found and path.is_dir():
        found = {name for name in FRAMEWORK_PACKS if (path / name).is_dir() or (path / "python" / name).is_dir()}
    return found.pop() if len(found) == 1 else None

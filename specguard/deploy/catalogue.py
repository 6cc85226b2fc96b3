"""The hazard catalogue (rules/hazards.toml): what each hazard says and the parameters its condition reads.

The catalogue is data a fork can edit (messages, fixes, which methods count as non-causal drafts, which vLLM
validation confirms a hazard); the condition of each code is code in hazards.py. A malformed catalogue is a
UserError naming the file, the key and the problem.
"""

from __future__ import annotations

import difflib
import string
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specguard._toml import load_toml, parse_toml
from specguard.errors import UserError

BUILTIN_CATALOGUE = "hazards.toml"

Severity = Literal["error", "warning", "info"]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Evidence(_Params):
    """A statement of the served source that decides the hazard: a raise/assert (kind "raise") or a warning
    call (kind "warning") whose text contains `text`. The hazard fires when the config reaches it."""

    text: str = Field(min_length=8)
    kind: Literal["raise", "warning"] = "raise"
    files: list[str] = Field(default_factory=lambda: ["**"], description="globs relative to the vllm/ package dir")


class Registry(_Params):
    """Where one model runner maps a method to speculator classes: `function` (a module function, or `Class.method`)
    evaluated with the config; the classes it returns new instances of, or (with `attribute`) stores in that
    attribute. `selected_by` is the value of the runner selection that picks this runner."""

    runner: str
    selected_by: bool
    file: str
    function: str
    attribute: str | None = None
    draft_path_class: str | None = None  # CFG101: the class the DFlash draft path descends from, in this runner


class RunnerSelection(_Params):
    """Which model runner serves a config: `function` (`Class.method`, a property of a config section) in `file`,
    evaluated with the config and the serving environment."""

    file: str
    function: str


class SpeculatorParams(_Params):
    """Which model runner the served source picks for the config (`selection`), where each runner maps a method to
    speculator classes (`registries`), and the analyzer rules to look for on them. The hazard is judged for the
    runner picked; where the pick is undecided or rests on an unset environment variable and the runners disagree,
    the verdict names the runner it assumed and what picks it."""

    selection: RunnerSelection
    registries: list[Registry] = Field(min_length=1)
    rules: list[str] = Field(min_length=1)


class DataParallelEngine(_Params):
    """Which engine core the served source runs each DP rank with: the classes `function` (`Class.method`) in
    `file` builds and stores in the local `stored_in`, evaluated with the config passed as the keyword
    `config_argument`. DP ranks share batches (and DP padding) only in an engine descending from
    `coordinated_class`; any other runs the rank on its own, with DP 1 (vLLM: a target that is not MoE)."""

    file: str
    function: str
    stored_in: str
    coordinated_class: str
    config_argument: str = "vllm_config"


class PaddedDraftParams(SpeculatorParams):
    """A DP hazard (CFG101, CFG117): judged where `data_parallel` says DP ranks share batches."""

    data_parallel: DataParallelEngine | None = None


class DraftPathParams(PaddedDraftParams):
    """CFG101: a method whose speculator descends from the runner's `draft_path_class`, with `rules` findings on it."""

    @model_validator(mode="after")
    def _draft_paths(self) -> DraftPathParams:
        missing = [r.runner for r in self.registries if r.draft_path_class is None]
        if missing:
            raise ValueError(f"registries of {', '.join(missing)} need a draft_path_class")
        return self


class OtherDraftPathParams(PaddedDraftParams):
    """CFG117: a method whose speculator has `rules` findings in its lineage, outside the draft paths another hazard
    judges (`judged_elsewhere`: the classes whose descendants CFG101 covers)."""

    judged_elsewhere: list[str] = Field(default_factory=list)


class InterleaveResolution(_Params):
    """Where vLLM may change the KV-cache interleave size the user gave (the deprecated dcp option copied over
    it, NIXL P/D aligning it to the block size): assignments to `attribute` in `file`, each judged with the
    conditions of its own function and of its callers."""

    file: str
    attribute: str


class InterleaveParams(_Params):
    """CFG102: a raise in the construction of the backend's metadata builder, under a test on `*{suffix}`."""

    registry_file: str
    interleave_attribute_suffix: str
    resolution: InterleaveResolution


class BuilderValidationParams(_Params):
    """CFG103: the validation every metadata builder of the served source runs at construction (`evidence`),
    judged for the target's builder and for the draft's; `role_attribute` is what marks a draft builder."""

    registry_file: str
    evidence: Evidence
    role_attribute: str
    resolution: InterleaveResolution  # what the target builder's `interleave_size == 1` reads


class GroupMergeParams(_Params):
    """CFG104: non-causal draft methods and the analyzer rules that show the any()-merge in the source."""

    methods: list[str] = Field(min_length=1)
    rules: list[str] = Field(min_length=1)


class EvidenceParams(_Params):
    """Hazards decided by vLLM's own validation: every statement of `evidence` the config may reach.

    `platform`: checks in another platform's module (`platforms/rocm.py` for "cuda") do not count.

    `neutral`: the config values under which the hazard cannot arise (`decode_context_parallel_size = 1`; a dotted
    key reaches into a JSON option, `speculative_config.draft_tensor_parallel_size`, where null removes the key).
    Where the source has no statement with the evidence's text (a fork rewording or moving it), the hazard is
    judged by meaning instead: every statement of the kind in `search` whose function reads one of the neutral
    keys is evaluated for the config and for the config made neutral; one the config reaches and the neutral
    config does not is the validation. A config that already is neutral has not the hazard. The value "unset"
    means the option (or the JSON key) is not given."""

    evidence: list[Evidence] = Field(min_length=1)
    platform: str = "cuda"
    neutral: dict[str, Any] = Field(min_length=1)
    search: list[str] = Field(default_factory=lambda: ["config/**", "engine/**", "platforms/**"], min_length=1)


class BlockSizeParams(EvidenceParams):
    """CFG110: the block-size validation, judged with the interleave size as vLLM resolves it."""

    resolution: InterleaveResolution


class SourceEnumParams(_Params):
    """A value that must name a member of an enum or Literal alias in the served source."""

    file: str
    symbol: str


class EnvironmentValidation(_Params):
    """A function of the served source that validates the whole serving environment at startup (`file`,
    `function`: a module function or `Class.method`), called with `arguments`: parameter -> the field of the
    engine arguments passed to it (`hard_fail` <- `fail_on_environ_validation`)."""

    file: str
    function: str
    arguments: dict[str, str] = Field(default_factory=dict)


class EnvironmentParams(_Params):
    """CFG116: the module of the served source whose attributes are the environment variables vLLM reads, each
    parsed by its own code when read (`envs`: its `__getattr__` and `environment_variables`); and the functions
    that validate the environment as a whole (`validations`), with the engine arguments class (`engine_args`,
    `file:Class`) their arguments come from."""

    module: str = "envs"
    validations: list[EnvironmentValidation] = Field(default_factory=list)
    engine_args: str = "engine/arg_utils.py:EngineArgs"


class ValidationEntry(_Params):
    """A function of the served source that validates the speculative config (`file`, `function`: a module function
    or `Class.method`), and the option it judges (`key`: what a verdict names)."""

    file: str
    function: str
    key: str


class ValidationParams(_Params):
    """CFG118: the speculative config's own validation, evaluated whole: every raise or assert the config reaches
    in `entries` (each followed through what it calls; a method that is not an entry point, from its callers), on
    every path, except the statements another hazard of the catalogue names (reported there)."""

    entries: list[ValidationEntry] = Field(min_length=1)


PARAMS: dict[str, type[_Params]] = {
    "CFG101": DraftPathParams,
    "CFG102": InterleaveParams,
    "CFG103": BuilderValidationParams,
    "CFG104": GroupMergeParams,
    "CFG105": EvidenceParams,
    "CFG106": SourceEnumParams,
    "CFG107": EvidenceParams,
    "CFG108": EvidenceParams,
    "CFG109": EvidenceParams,
    "CFG110": BlockSizeParams,
    "CFG111": SourceEnumParams,
    "CFG112": SourceEnumParams,
    "CFG113": EvidenceParams,
    "CFG114": SpeculatorParams,
    "CFG115": EvidenceParams,
    "CFG116": EnvironmentParams,
    "CFG117": OtherDraftPathParams,
    "CFG118": ValidationParams,
}


class Hazard(BaseModel):
    """One catalogue entry. `message` and `fix` are format strings over the facts the condition found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    title: str = Field(min_length=3)
    severity: Severity
    message: str = Field(min_length=10)
    fix: str = Field(min_length=5)
    params: _Params
    # Documentation only (the hazard's page in docs/hazards/): when it fires, and what it reads in the source.
    fires_when: str = ""
    reads: str = ""


class Catalogue(BaseModel):
    model_config = ConfigDict(frozen=True)

    origin: str
    hazards: dict[str, Hazard]

    def __getitem__(self, code: str) -> Hazard:
        return self.hazards[code]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=3)
    severity: Severity
    message: str = Field(min_length=10)
    fix: str = Field(min_length=5)
    params: dict[str, Any] = Field(default_factory=dict)
    fires_when: str = ""
    reads: str = ""


def _problem(exc: ValidationError, model: type[BaseModel]) -> tuple[str, str]:
    """The key and problem to report; a misspelt key is reported as unknown (with a guess among the keys of the
    table it is in), not as missing."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in err["loc"])
    problem = {"extra_forbidden": "unknown key", "missing": "missing"}.get(err["type"], err["msg"])
    if err["type"] == "extra_forbidden":
        guess = difflib.get_close_matches(str(err["loc"][-1]), _keys_at(model, err["loc"][:-1]), n=1)
        if guess:
            problem += f" (did you mean '{guess[0]}'?)"
    return key, problem


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys of the table at `loc` (table names and list indexes) inside `model`'s."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        inner = [
            a for a in (*typing.get_args(annotation), annotation) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:
            return []
        model = inner[0]
    return list(model.model_fields)


def _check_template(origin: str, code: str, field: str, text: str) -> None:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise UserError(f"{origin}: hazard '{code}.{field}': bad placeholder: {exc}") from None
    for name in names:
        if not name.isidentifier():
            raise UserError(f"{origin}: hazard '{code}.{field}': placeholder '{{{name}}}' is not a plain name")


def parse_catalogue(raw: dict[str, Any], origin: str) -> Catalogue:
    section = raw.get("hazards")
    extra = sorted(set(raw) - {"hazards"})
    if extra:
        raise UserError(f"{origin}: unknown top-level key '{extra[0]}' (expected only [hazards.CFGxxx] tables)")
    if not isinstance(section, dict):
        raise UserError(f"{origin}: missing [hazards.CFGxxx] tables")
    hazards: dict[str, Hazard] = {}
    for code, body in section.items():
        if code not in PARAMS:
            raise UserError(f"{origin}: hazard '{code}': unknown code (known: {', '.join(PARAMS)})")
        if not isinstance(body, dict):
            raise UserError(f"{origin}: hazard '{code}': expected a table")
        try:
            entry = _Entry.model_validate(body)
        except ValidationError as exc:
            key, problem = _problem(exc, _Entry)
            raise UserError(f"{origin}: hazard '{code}.{key}': {problem}") from None
        try:
            params = PARAMS[code].model_validate(entry.params)
        except ValidationError as exc:
            key, problem = _problem(exc, PARAMS[code])
            where = f"{code}.params.{key}" if key else f"{code}.params"
            raise UserError(f"{origin}: hazard '{where}': {problem}") from None
        for field in ("message", "fix"):
            _check_template(origin, code, field, getattr(entry, field))
        hazards[code] = Hazard(
            code=code,
            title=entry.title,
            severity=entry.severity,
            message=entry.message,
            fix=entry.fix,
            params=params,
            fires_when=entry.fires_when,
            reads=entry.reads,
        )
    missing = [code for code in PARAMS if code not in hazards]
    if missing:
        raise UserError(f"{origin}: hazard '{missing[0]}' is missing from the catalogue")
    return Catalogue(origin=origin, hazards=hazards)


def _builtin_text() -> str:
    try:
        return resources.files("specguard._packs").joinpath(BUILTIN_CATALOGUE).read_text(encoding="utf-8")
    except ModuleNotFoundError:  # a source checkout that was never installed
        return (Path(__file__).resolve().parents[2] / "rules" / BUILTIN_CATALOGUE).read_text(encoding="utf-8")


def load_catalogue(path: Path | None = None) -> Catalogue:
    """The built-in catalogue, or the file at `path` (a fork's edited copy)."""
    if path is None:
        origin = f"built-in {BUILTIN_CATALOGUE}"
        raw = parse_toml(_builtin_text(), origin=origin, what="hazard catalogue")
    else:
        origin = str(path)
        raw = load_toml(path, what="hazard catalogue")
    return parse_catalogue(raw, origin)

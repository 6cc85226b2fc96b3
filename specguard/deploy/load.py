"""Turn a YAML file and/or `vllm serve` arguments into a validated ServingConfig, or a one-line UserError.

`specguard config FILE.yaml -- ARGS` is read as `vllm serve ARGS --config FILE.yaml`: the served source's own
option definitions and vLLM's preprocessing (`cmdline.py`), then the checks vLLM's parser makes on config JSON
(unknown keys, the field validators of the values the hazards read, run by the static evaluator), then the
pydantic model of what the hazards read.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specguard._files import DATA_CAP, UnreadableFile, read_regular_text
from specguard._nesting import NESTED_TOO_DEEPLY
from specguard.deploy import cmdline
from specguard.deploy.arguments import OptionDef, ServeOptions, TypeReader
from specguard.deploy.evaluator import config_evaluator
from specguard.deploy.facts import SourceFacts
from specguard.deploy.fields import FieldTypes, Refused, field_validators, post_init_refusal
from specguard.deploy.model import FALLBACK_OPTIONS, ServingConfig
from specguard.errors import UserError
from specguard.evaluation.budget import run_budget
from specguard.evaluation.values import UNKNOWN, ClassRef, EnumMember, Function, known
from specguard.program.tree import ClassInfo

# Values inside config JSON the hazards read, by option dest: they are validated at reading, as vLLM does.
NESTED_CHECKS = {"compilation_config": ("cudagraph_mode",), "attention_config": ("backend",)}


@dataclass
class Loaded:
    config: ServingConfig
    reading: cmdline.Reading
    origin: str
    notes: list[str] = field(default_factory=list)


def read_yaml(path: str | Path) -> Any:
    """The data in a `vllm serve --config` YAML file (vLLM needs a mapping; `yaml_to_args` says so)."""
    try:  # deferred: only `specguard config` needs PyYAML, never the analyzer
        import yaml

        from specguard.deploy.bounded_yaml import parse_yaml
    except ImportError:
        raise UserError(
            f"{path}: reading YAML needs PyYAML: pip install pyyaml (what specguard's `config` extra adds), "
            "or give the options as vllm serve arguments after --"
        ) from None

    if not os.path.lexists(path):
        raise UserError(f"{path}: no such file")
    try:
        text = read_regular_text(path, DATA_CAP)
    except UnreadableFile as exc:
        raise UserError(f"{path}: {exc.reason}") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    except (ValueError, OverflowError) as exc:  # a scalar Python cannot hold: a 6,000-digit integer, a 13th month
        raise UserError(f"{path}: invalid YAML: {str(exc).splitlines()[0].split(';')[0]}") from None
    except RecursionError:  # PyYAML's scanner and composer recurse; the loader refuses deep nesting well before
        raise UserError(f"{path}: invalid YAML: {NESTED_TOO_DEEPLY}") from None


def _edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: a transposition counts as one edit, like a typo does."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def suggest(key: str, candidates: Sequence[str]) -> str | None:
    """The option `key` is a likely misspelling of, if any (a small edit distance decides)."""
    for match in difflib.get_close_matches(key, candidates, n=3, cutoff=0.75):
        if match != key and _edit_distance(key, match) <= (1 if len(match) < 10 else 2):
            return match
    return None


class ConfigChecker:
    """What vLLM's parser checks in a config-dataclass JSON value (`--compilation-config '{...}'`): that every
    key is a field of the dataclass, and, for the values the hazards read, what the field's validators make
    of them (e.g. `CUDAGraphMode[value.upper()]`, or the enum member with that value)."""

    def __init__(self, facts: SourceFacts) -> None:
        self.facts = facts
        self.tree = facts.tree
        self.reader = TypeReader(facts.tree)
        self.types = FieldTypes(facts.tree, self.reader)

    def __call__(self, option: OptionDef, value: dict[str, Any]) -> dict[str, Any]:
        cls = option.value.config
        if cls is None:
            return value
        fields = [name for name, _, _ in self.reader.fields(cls)]
        for key in value:
            if key not in fields:
                dashed = str(key).replace("-", "_")
                hint = f" (vLLM's keys use underscores: '{dashed}')" if dashed in fields else ""
                guess = suggest(str(key), fields) if not hint else None
                hint = hint or (f"; did you mean '{guess}'?" if guess else "")
                raise argparse.ArgumentTypeError(f"{cls.name} has no field '{key}'{hint}")
        out = dict(value)
        for name in value:
            if name in NESTED_CHECKS.get(option.dest, ()):
                out[name] = self.field_value(cls, name, out[name])
            elif self._validators(cls, name):
                self.field_value(cls, name, out[name])  # refuses what the field's own validator refuses
        try:  # field types and Literals as pydantic checks them, then what __post_init__ refuses
            self.types.check(cls, value)
        except Refused as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        refusal = post_init_refusal(self.tree, cls, out)
        if refusal is not None:
            raise argparse.ArgumentTypeError(f"{cls.name}: {refusal}")
        return out

    def field_value(self, cls: ClassInfo, name: str, value: Any, *, at_startup: bool = False) -> Any:
        """`value` after the class's before-validators and enum coercion; an enum member becomes its name.

        Raises ArgumentTypeError where vLLM fails (with `at_startup`, returns the raw value instead: the
        hazards report it). A validator the evaluator cannot follow leaves the value as given."""
        try:
            return self._field_value(cls, name, value, at_startup)
        except argparse.ArgumentTypeError:
            raise
        except Exception:  # noqa: BLE001 - an unusual validator costs its check, not the run
            return value

    def startup_value(self, class_name: str, name: str, value: Any) -> Any:
        """A value vLLM validates only when it builds the config (`--attention-backend`): as the served
        field validator makes it, or as given where vLLM will refuse it at startup."""
        cls = self.tree.resolve_class(f"{self.tree.package}.config", class_name)
        return self.field_value(cls, name, value, at_startup=True) if cls is not None else value

    def _field_value(self, cls: ClassInfo, name: str, value: Any, at_startup: bool) -> Any:
        ev = config_evaluator(self.tree)
        current: Any = value
        for validator, owner in self._validators(cls, name):
            module = self.tree.module(owner.module)
            if module is None:
                continue
            current, _ = ev.call_function(Function(module, validator, owner), [current], {}, self_value=ClassRef(cls))
            failed = [o for o in ev.outcomes if o.site.kind in ("raise", "assert") and not o.path]
            if failed:
                if at_startup:
                    return value
                raise argparse.ArgumentTypeError(
                    f"{cls.name}.{name}: {failed[0].site.message or 'invalid value'} (got {value!r})"
                )
            if current is UNKNOWN:
                return value
        enum = self.tree.field_enum(cls, name)
        if enum is not None and current is not None and not isinstance(current, EnumMember) and known(current):
            current = ev.enum_by_value(enum, current)
            if current is UNKNOWN:
                if at_startup:
                    return value
                members = ", ".join(ev.tree.enum_members(enum))
                raise argparse.ArgumentTypeError(f"{cls.name}.{name}: {value!r} is not a {enum.name} ({members})")
        return current.name if isinstance(current, EnumMember) else current

    def _validators(self, cls: ClassInfo, name: str) -> list[tuple[Any, ClassInfo]]:
        """The field's `before` validators (run on the raw value, in the served source's order)."""
        return [
            (method, owner)
            for mode, method, owner in field_validators(self.tree, cls).get(name, [])
            if mode == "before"
        ]


def load(file: str | None, serve_args: Sequence[str] | None, facts: SourceFacts | None) -> Loaded:
    """Read the config as `vllm serve [ARGS] [--config FILE]` with the served source's definitions."""
    with run_budget():
        return _load(file, serve_args, facts)


def _load(file: str | None, serve_args: Sequence[str] | None, facts: SourceFacts | None) -> Loaded:
    argv = list(serve_args or [])
    if file is not None:
        argv += ["--config", file]
    origin = file if file is not None and not serve_args else "vllm serve arguments"
    notes: list[str] = []
    checker: ConfigChecker | None = None
    served = facts.serve_options if facts is not None else ServeOptions()
    if served.problems:
        notes.append(f"the served option definitions could not all be read: {'; '.join(served.problems)}")
    if served.options:
        checker = ConfigChecker(facts)  # type: ignore[arg-type]
    # Where the served definitions are missing or incomplete, the modelled options keep their usual shapes, and an
    # argument nobody defines is skipped with a note instead of blaming the command line for the source's fault.
    options = _with_fallbacks(served)
    strict = not served.incomplete
    try:
        reading = cmdline.read(argv, options, read_yaml, checker, origin, strict=strict)
    except cmdline.UnknownOptions as exc:
        raise UserError(_unknown_message(exc, options, origin)) from None
    if reading.ignored:
        typo = _unknown_message(cmdline.UnknownOptions(reading.ignored), options, origin)
        if "did you mean" in typo:
            raise UserError(typo)
        why = "the served source's option definitions are incomplete" if served.options else "pass --vllm-source DIR"
        notes.append(f"not read: {' '.join(reading.ignored)} ({why})")
    config = build(reading.values, origin, checker)
    return Loaded(config, reading, origin, notes)


def _with_fallbacks(served: ServeOptions) -> ServeOptions:
    """The served definitions, with the modelled options' usual shapes where a served one is missing or unread."""
    if not served.options:
        return ServeOptions(options=list(FALLBACK_OPTIONS))
    if not served.incomplete:
        return served
    read = {o.dest for o in served.options if o.complete}
    extra = [o for o in FALLBACK_OPTIONS if o.dest not in read]
    replaced = {o.dest for o in extra}
    taken = {f for o in extra for f in o.flags}
    kept = [o for o in served.options if o.dest not in replaced and not set(o.flags) & taken]
    return dataclasses.replace(served, options=[*kept, *extra])


def _unknown_message(exc: Exception, options: ServeOptions, origin: str) -> str:
    unknown: list[str] = getattr(exc, "arguments", [])
    flags = sorted(options.flag_names())
    for arg in unknown:
        if arg.startswith("--"):
            guess = suggest(arg.split("=", 1)[0], flags)
            if guess is not None:
                return f"{origin}: unknown option '{arg.split('=', 1)[0]}'; did you mean '{guess}'?"
    return f"{origin}: unrecognized arguments: {' '.join(unknown)}"


def build(values: dict[str, Any], origin: str, checker: ConfigChecker | None = None) -> ServingConfig:
    """The pydantic model of what the hazards read, from a parsed namespace (argparse dests).

    The attention backends are the effective ones: `--attention-backend`, else `--attention-config.backend`,
    and the draft's `speculative-config.attention_backend`, each as its validator at startup makes it (an
    unknown name stays as given, for CFG112 to report)."""
    data = {k: v for k, v in values.items() if v is not None}
    backend = values.get("attention_backend")
    attention = values.get("attention_config")
    if backend is None and isinstance(attention, dict):
        backend = attention.get("backend")
    elif backend is not None and checker is not None:
        backend = checker.startup_value("AttentionConfig", "backend", backend)
    data["attention_backend"] = backend
    spec = data.get("speculative_config")
    if isinstance(spec, dict) and spec.get("attention_backend") is not None and checker is not None:
        draft = checker.startup_value("SpeculativeConfig", "attention_backend", spec["attention_backend"])
        data["speculative_config"] = {**spec, "attention_backend": draft}
    try:
        return ServingConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise UserError(f"{origin}: {_describe(errors[0])}{more}") from None


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "greater_than_equal": "an integer >= {ge}",
    "greater_than": "an integer > {gt}",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "list_type": "a list",
}


def _describe(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
    # pydantic may put a validator or union-branch tag in the location (`function-before[...]`); drop it.
    path = ".".join(p for p in loc if "[" not in p).replace("_config.", "-config.")
    path = path.split(".")[0].replace("_", "-") + ("." + path.split(".", 1)[1] if "." in path else "")
    template = _EXPECTED.get(err["type"])
    if template is not None:
        expected = template.format(**(err.get("ctx") or {}))
    else:
        expected = str(err.get("msg", "a valid value")).removeprefix("Value error, ")
    got = err.get("input")
    if isinstance(got, (str, int, float, bool)) or got is None:
        shown = repr(got) if len(repr(got)) <= 60 else repr(got)[:57] + "..."
        return f"{path or 'config'}: expected {expected}, got {shown}"
    return f"{path or 'config'}: expected {expected}, got a {type(got).__name__}"

"""Turn a YAML file or `vllm serve` arguments into a validated ServingConfig, or a one-line UserError.

Both inputs go through the same normalization (dashes, short options, JSON-valued options) so a YAML file and the
equivalent argv give the same config.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specguard.deploy.model import (
    FLAG_OPTIONS,
    SHORT_OPTIONS,
    ServingConfig,
    json_mapping,
    modelled_keys,
    nested_keys,
)
from specguard.errors import UserError

# Known real option names (from the served source) that must never be reported as misspellings.
KnownOptions = Callable[[], Iterable[str]]


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
    """The modelled key `key` is a likely misspelling of, if any.

    difflib ranks; a small edit distance decides. Ratio alone would flag real vLLM options such as
    `data-parallel-size-local` as a misspelling of `data-parallel-size`.
    """
    for match in difflib.get_close_matches(key, candidates, n=3, cutoff=0.75):
        if match != key and _edit_distance(key, match) <= (1 if len(match) < 8 else 2):
            return match
    return None


def _option_name(key: Any) -> str:
    name = str(key).strip().lstrip("-").replace("_", "-")
    return SHORT_OPTIONS.get(name, name)


def normalize(raw: dict[str, Any], origin: str, known: KnownOptions | None = None) -> dict[str, Any]:
    """Canonical dashed top-level keys; misspellings of modelled keys (top level and nested) are errors."""
    keys = modelled_keys()
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    known_set: set[str] | None = None
    for key, value in raw.items():
        name = _option_name(key)
        if name in out:
            raise UserError(f"{origin}: option '{name}' is given twice (as '{spelled[name]}' and '{key}')")
        if name not in keys:
            guess = suggest(name, keys)
            if guess is not None:
                if known_set is None:
                    known_set = {_option_name(k) for k in known()} if known else set()
                if name not in known_set:
                    raise UserError(f"{origin}: unknown option '{key}'; did you mean '{guess}'?")
        spelled[name] = str(key)
        out[name] = value
    for option in ("speculative-config", "compilation-config"):
        value = out.get(option)
        if isinstance(value, dict):
            fields = nested_keys(option)
            for sub in value:
                sub_name = str(sub).replace("-", "_")
                if sub_name in fields:
                    continue
                guess = suggest(sub_name, fields)
                if guess is not None:
                    raise UserError(f"{origin}: unknown key '{option}.{sub}'; did you mean '{option}.{guess}'?")
    return out


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
    path = ".".join(p for p in loc if "[" not in p)
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


def build(raw: dict[str, Any], origin: str, known: KnownOptions | None = None) -> ServingConfig:
    """Normalize and validate; the first problem becomes a UserError naming the key path and the expectation."""
    data = normalize(raw, origin, known)
    try:
        return ServingConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise UserError(f"{origin}: {_describe(errors[0])}{more}") from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a `vllm serve --config` YAML file."""
    try:
        import yaml  # deferred: only `specguard config` needs PyYAML, never the analyzer
    except ImportError:
        raise UserError(
            f"{path}: reading YAML needs PyYAML: pip install 'specguard[config]' "
            "(or give the options as vllm serve arguments after --)"
        ) from None

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of vllm serve options, got a YAML {type(data).__name__}")
    return data


def parse_argv(argv: Sequence[str]) -> dict[str, Any]:
    """`vllm serve` arguments -> the mapping a config file would hold.

    The first positional is the model; `--x=v`, `--x v`, switches, `--no-x`, short options (`-tp 2`) and vLLM's
    dotted JSON keys (`--speculative-config.method dflash`) are understood. `--config FILE` is read first and the
    other arguments override it, as in vLLM.
    """
    out: dict[str, Any] = {}
    base: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    args = list(argv)
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or _is_number(tok):
            if "model" not in out:
                out["model"] = tok
                continue
            raise UserError(f"vllm serve arguments: unexpected positional argument '{tok}'")
        name, eq, value = tok.lstrip("-").partition("=")
        head, dot, sub = name.partition(".")
        name = _option_name(head) + dot + sub  # `-sc.method` is `--speculative-config.method`
        if not eq:
            if name in FLAG_OPTIONS:
                value = True
            elif name.startswith("no-") and name[3:] in FLAG_OPTIONS:
                name, value = name[3:], False
            elif i < len(args) and (not args[i].startswith("-") or _is_number(args[i])):
                value = args[i]
                i += 1
            else:
                value = True  # an unmodelled switch: accepted and ignored
        if name == "config":
            if value is True:
                raise UserError("vllm serve arguments: --config needs a file")
            base = read_yaml(value)
            continue
        head, dot, sub = name.partition(".")
        if dot:
            dotted.setdefault(head, {})[sub.replace("-", "_")] = _scalar(value)
            continue
        out[name] = value
    merged = {_option_name(k): v for k, v in base.items()}
    merged.update(out)
    for head, subs in dotted.items():
        current = merged.get(head)
        if isinstance(current, str):
            try:
                current = json_mapping(current)
            except ValueError as exc:
                raise UserError(f"vllm serve arguments: {head}: {exc}") from None
        merged[head] = {**(current if isinstance(current, dict) else {}), **subs}
    return merged


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _scalar(value: Any) -> Any:
    """Dotted JSON keys carry a JSON scalar (`--speculative-config.num_speculative_tokens 4`), else a string."""
    import json

    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value

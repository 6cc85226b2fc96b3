"""Read `vllm serve` arguments and `--config` YAML files the way the served vLLM reads them.

vLLM's FlexibleArgumentParser is the standard library's argparse plus a preprocessing pass. specguard rebuilds
the same thing: an argparse parser made from the served source's option definitions (`arguments.py`: names,
short flags, nargs, switches, choices, value types), fed with arguments preprocessed as vLLM does:

- `--model M` moves to the front; `--config FILE` is replaced by the file's options, placed after the model and
  before the other arguments (so the command line wins); a YAML `true` is a bare switch, `false` is `--no-x`
  (dropped when there is no such switch), a list is several values, a mapping is one JSON value;
- underscores in an option name become dashes (up to its first `.`); `-O3` is `--optimization-level 3`;
- dotted keys (`--speculative-config.method dflash`, `-sc.num_speculative_tokens 3`, `--x.list+ a,b`) are
  collected per spelling of the option and re-added as one JSON value each, after all other arguments: the last
  one wins, they are not merged with a JSON value given for the same option;
- argparse itself then resolves abbreviations (`--tensor-parallel 4`), nargs, switches and choices, and a
  repeated option keeps its last value.

After parsing, what EngineArgs does before building configs is applied too: `--spec-method`/`--spec-model`/
`--spec-tokens` go into the speculative config (an error if that key is also given there), dashes in its keys
become underscores, and `--attention-backend` and `--attention-config.backend` may not both be set.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specguard._nesting import MAX_DEPTH, NESTED_TOO_DEEPLY, deeper_than
from specguard.deploy.arguments import OptionDef, ServeOptions, ValueKind
from specguard.errors import UserError

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass
class Reading:
    """The parsed namespace (only what was given) and what vLLM derives from it before building configs."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The arguments argparse saw, after vLLM's preprocessing (for messages and tests).
    processed: list[str] = field(default_factory=list)
    # Without the served definitions, arguments that are not modelled options are skipped.
    ignored: list[str] = field(default_factory=list)


class UnknownOptions(Exception):
    """Arguments the served parser does not know (vLLM exits with "unrecognized arguments")."""

    def __init__(self, arguments: list[str]) -> None:
        super().__init__(" ".join(arguments))
        self.arguments = arguments


# A hook that checks a config-dataclass JSON value (`--compilation-config`) as vLLM's parser would;
# returns the value or raises argparse.ArgumentTypeError.
ConfigCheck = Callable[[OptionDef, dict[str, Any]], dict[str, Any]]


class _ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise _ParseError(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:  # type: ignore[override]
        raise _ParseError(message or f"exited with status {status}")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse asks for a formatter on every add_argument, and one asks the terminal its size (a system call
        # each): this parser's help is never shown, so a fixed width (a config run registers hundreds of options)
        return self.formatter_class(prog=self.prog, width=100)


class _Switch(argparse.Action):
    """A vLLM boolean switch: `--x` / `--no-x` (and `--enable-y` / `--disable-y` where the source pairs them)."""

    def __init__(
        self, option_strings: list[str], dest: str, negatives: frozenset[str] = frozenset(), **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.negatives = negatives

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string not in self.negatives)


def human_readable_int(text: str) -> int:
    """`1k` = 1000, `1K` = 1024, `25.6k` = 25600; decimals with a binary suffix are refused (as in vLLM)."""
    text = text.strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        try:
            if suffix in _DECIMAL:
                return int(float(number) * _DECIMAL[suffix])
            return read_int(number) * _BINARY[suffix]
        except OverflowError:  # int(float("1" * 400 + "k")): an infinite float
            raise ValueError(NUMBER_TOO_LONG) from None
    return read_int(text)


def read_int(text: str) -> int:
    """int(text), its ValueError for digits past Python's int-from-string limit (4,300) saying so in one line."""
    try:
        return int(text)
    except ValueError:
        if re.fullmatch(r"\s*[-+]?[\d_]+\s*", text):
            raise ValueError(NUMBER_TOO_LONG) from None
        raise


NUMBER_TOO_LONG = "a number too long to read (Python reads integers of at most 4,300 digits)"


class RefusedJson(json.JSONDecodeError):
    """JSON that parses, or would, but is refused before anything reads it: every caller that tells a value that is
    not JSON from one that is refused (a dotted key's value falls back to text) catches this one class."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(reason, text, 0)


class NestedTooDeeply(RefusedJson):
    """JSON nested deeper than a configuration needs: json.loads, and what reads its value after it, recurse."""

    def __init__(self, text: str) -> None:
        super().__init__(NESTED_TOO_DEEPLY, text)


def load_json(text: str) -> Any:
    """json.loads, refusing nesting past what `_nesting` allows (a RecursionError before it, a deep value after)
    and integers past Python's int-from-string limit (json.loads raises a bare ValueError for those)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise NestedTooDeeply(text) from None
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise RefusedJson(NUMBER_TOO_LONG, text) from None
    if deeper_than(value):
        raise NestedTooDeeply(text)
    return value


def _converter(option: OptionDef, check: ConfigCheck | None, expand_numbers: bool) -> Callable[[str], Any]:
    kind = option.value

    def convert(text: str) -> Any:
        if kind.optional and text in ("", "None"):
            return None
        try:
            return _convert(option, text, check, expand_numbers)
        except argparse.ArgumentTypeError:
            raise
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(_expected(kind, text, exc)) from None

    convert.__name__ = kind.kind  # argparse names the type in some of its messages
    return convert


def _convert(option: OptionDef, text: str, check: ConfigCheck | None, expand_numbers: bool) -> Any:
    kind = option.value
    if kind.kind == "int":
        return read_int(text)
    if kind.kind == "human_int":
        if text.strip() == "-1" or text.strip().lower() == "auto":
            return -1
        return human_readable_int(text)
    if kind.kind == "float":
        return float(text)
    if kind.kind == "bool":
        return bool(text)
    if kind.kind == "json":
        return load_json(text)
    if kind.kind == "dict_or_str":
        return load_json(text) if re.match(r"(?s)^\s*{.*}\s*$", text) else text
    if kind.kind == "config":
        try:
            value = load_json(_expand_numbers(text) if expand_numbers else text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"invalid JSON ({exc.msg}): {_short(text)}") from None
        if not isinstance(value, dict):
            name = kind.config.name if kind.config else "config"
            raise argparse.ArgumentTypeError(f"expected a JSON object for {name}, got {_short(text)}")
        return check(option, value) if check is not None else value
    return text


def _expand_numbers(text: str) -> str:
    """vLLM lets bare human-readable numbers stand in config JSON (`{"cpu_bytes_to_use": 80m}`)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable_int(m.group())), parts[i])
    return "".join(parts)


def _expected(kind: ValueKind, text: str, exc: Exception) -> str:
    what = {
        "int": "an integer",
        "human_int": "an integer (or 1k, 2M, ...)",
        "float": "a number",
        "json": "a JSON value",
        "dict_or_str": "a string or a JSON object",
    }.get(kind.kind, "a valid value")
    detail = f" ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
    if str(exc) == NUMBER_TOO_LONG:
        detail = f" ({NUMBER_TOO_LONG})"
    return f"expected {what}{detail}, got {_short(text)}"


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def build_parser(options: ServeOptions, check: ConfigCheck | None) -> tuple[_Parser, set[str]]:
    """The argparse parser the served source defines; also every option string it accepts (hidden ones too)."""
    parser = _Parser(prog="vllm serve", add_help=False, allow_abbrev=True)
    strings: set[str] = set()
    for option in options.options:
        convert = _converter(option, check, options.json_number_expansion)
        choices = list(option.choices) if option.choices is not None else None
        if not option.flags:
            parser.add_argument(
                option.dest, nargs=option.nargs, type=convert, choices=choices, default=argparse.SUPPRESS
            )
            continue
        if option.action == "boolean":
            flags, negatives = _switch_strings(option.flags, options.inverse_prefixes)
            flags = [f for f in flags if f not in strings]
            strings.update(flags)
            parser.add_argument(
                *flags, dest=option.dest, action=_Switch, negatives=frozenset(negatives), default=argparse.SUPPRESS
            )
            continue
        flags = [f for f in option.flags if f not in strings]
        if not flags:
            continue
        strings.update(flags)
        kwargs: dict[str, Any] = {"dest": option.dest, "default": argparse.SUPPRESS}
        if option.action in ("store_true", "store_false", "count", "help", "version"):
            kwargs["action"] = "store_true" if option.action in ("help", "version") else option.action
        elif option.action in ("store_const", "append_const"):
            kwargs.update(action=option.action, const=option.const)
        else:
            kwargs.update(type=convert, choices=choices, nargs=option.nargs)
            if option.action == "append":
                kwargs["action"] = "append"
            if option.nargs == "?":
                kwargs["const"] = option.const
        parser.add_argument(*flags, **kwargs)
    return parser, strings


def _switch_strings(flags: Sequence[str], inverse: dict[str, str]) -> tuple[list[str], set[str]]:
    out = list(flags)
    negatives: set[str] = set()
    for flag in flags:
        if flag.startswith("--"):
            negative = "--no-" + flag[2:]
            out.append(negative)
            negatives.add(negative)
            for prefix, other in inverse.items():
                if flag.startswith(prefix):
                    out.append(other + flag[len(prefix) :])
                    negatives.add(other + flag[len(prefix) :])
    return list(dict.fromkeys(out)), negatives


# -- vLLM's preprocessing -----------------------------------------------------------------------------------------


def _move_model(args: list[str]) -> list[str]:
    """`--model M` anywhere becomes the leading positional, as `vllm serve` does (with a deprecation warning)."""
    for i, arg in enumerate(args):
        if re.match(r"^--model(=.+|$)", arg):
            if arg == "--model":
                if i + 1 >= len(args):
                    raise UserError("vllm serve arguments: --model needs a value")
                return [args[i + 1], *args[:i], *args[i + 2 :]]
            return [arg.removeprefix("--model="), *args[:i], *args[i + 1 :]]
    return args


def yaml_to_args(path: str, data: Any, known_strings: set[str]) -> list[str]:
    """The arguments vLLM makes of a `--config` YAML mapping."""
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else f"a YAML {type(data).__name__}"
        raise UserError(f"{path}: vLLM expects a mapping of vllm serve options, got {kind}")
    out: list[str] = []
    for key, value in data.items():
        name = f"--{key}"
        if isinstance(value, bool):
            if value:
                out.append(name)
            elif f"--no-{key}" in known_strings:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out.append(name)
                out.extend(str(item) for item in value)
        elif isinstance(value, dict):
            out += [name, json.dumps(value)]
        else:
            out += [name, str(value)]
    return out


def _pull_config(args: list[str], load: Callable[[str], Any], known_strings: set[str]) -> list[str]:
    if args.count("--config") > 1:
        raise UserError("vllm serve arguments: --config is given more than once (vLLM reads one config file)")
    index = args.index("--config")
    if index == len(args) - 1:
        raise UserError("vllm serve arguments: --config needs a file")
    path = args[index + 1]
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        raise UserError(f"{path}: vLLM reads only .yaml/.yml config files, got '.{extension}'")
    config_args = yaml_to_args(path, load(path), known_strings)
    model_in_cli = bool(args) and not args[0].startswith("-")
    if not model_in_cli and "--model" not in config_args:
        raise UserError(f"{path}: no model: vLLM needs the model as the first argument or `model:` in the config")
    if model_in_cli:
        return [args[0], *config_args, *args[1:index], *args[index + 2 :]]
    return [*config_args, *args[:index], *args[index + 2 :]]


def _dashes(arg: str) -> str:
    """`--a_b.c_d=v` -> `--a-b.c_d=v`: underscores become dashes from `--` up to the first `.`."""

    def dashed(key: str) -> str:
        return re.sub(r"(?<=--)[^.]*", lambda m: m.group(0).replace("_", "-"), key, count=1)

    if "=" in arg:
        key, value = arg.split("=", 1)
        return f"{dashed(key)}={value}"
    return dashed(arg)


def _scalar(text: str) -> Any:
    """A dotted key's value: JSON where it parses (a RefusedJson goes up), else a number or the text; a number
    too long to read is refused, not read as text."""
    try:
        return load_json(text)
    except RefusedJson:
        raise
    except json.JSONDecodeError:
        try:
            return human_readable_int(text)
        except ValueError as exc:
            if str(exc) == NUMBER_TOO_LONG:
                raise RefusedJson(NUMBER_TOO_LONG, text) from None
            return text


def _merge_into(original: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge_into(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] = original[key] + value
        else:
            original[key] = value


def preprocess(args: list[str], origin: str = "vllm serve arguments") -> list[str]:
    """Underscores, `-O`, and dotted keys, in that order, as FlexibleArgumentParser.parse_args does them."""
    processed: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            processed.append(_dashes(arg))
        elif arg.startswith("-O") and arg != "-O":
            level = arg[3:] if len(arg) > 2 and arg[2] == "=" else arg[2:]
            processed += ["--optimization-level", level]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
    skip: set[int] = set()
    dotted: dict[str, dict[str, Any]] = {}
    for i, arg in enumerate(processed):
        if i in skip or not (arg.startswith("-") and "." in arg):
            continue
        if "=" in arg:
            key_part, value_text = arg.split("=", 1)
            if "." not in key_part:
                continue  # the dot was in the value
        else:
            if i + 1 >= len(processed):
                raise UserError(f"{origin}: {arg} needs a value")
            key_part, value_text = arg, processed[i + 1]
            skip.add(i + 1)
        value: Any
        head, *path = key_part.removesuffix("+").split(".")
        if len(path) > MAX_DEPTH:  # each part is a level of the JSON value built from it
            raise UserError(f"{origin}: {_short(key_part)}: {NESTED_TOO_DEEPLY}")
        if key_part.endswith("+"):
            key_part = key_part[:-1]
            value = value_text.split(",")
        else:
            try:
                value = _scalar(value_text)
            except RefusedJson as exc:
                raise UserError(f"{origin}: {_short(key_part)}: {_short(value_text)}: {exc.msg}") from None
        nested: Any = value
        for part in reversed(path):
            nested = {part: nested}
        _merge_into(dotted.setdefault(head, {}), nested)
        skip.add(i)
    out = [a for i, a in enumerate(processed) if i not in skip]
    for head, value in dotted.items():
        out += [head, json.dumps(value)]
    return out


def read(
    argv: Sequence[str],
    options: ServeOptions,
    load_yaml: Callable[[str], Any],
    check: ConfigCheck | None = None,
    origin: str = "vllm serve arguments",
    strict: bool = True,
) -> Reading:
    """Parse `vllm serve` arguments (a `--config FILE` among them is read with `load_yaml`) as vLLM does.

    `strict`: arguments the parser does not know raise UnknownOptions (vLLM refuses them); otherwise they are
    skipped and listed in `Reading.ignored` (reading without the served definitions).
    """
    parser, strings = build_parser(options, check)
    args = _move_model(list(argv))
    served_name = any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)
    if args and args[0].startswith("-") and "--config" not in args and served_name:
        raise UserError(f"{origin}: vLLM needs the model as the first argument when --served-model-name is given")
    if "--config" in args:
        args = _pull_config(args, load_yaml, strings)
    processed = preprocess(args, origin)
    try:
        namespace, extras = parser.parse_known_args(processed)
    except _ParseError as exc:
        raise UserError(f"{origin}: {exc}") from None
    if extras and strict:
        raise UnknownOptions(extras)
    reading = Reading(values=vars(namespace), processed=processed, ignored=extras)
    _apply_engine_args(reading, options, origin)
    return reading


def _apply_engine_args(reading: Reading, options: ServeOptions, origin: str) -> None:
    values = reading.values
    if "model_tag" in values and values["model_tag"] is not None:
        values["model"] = values.pop("model_tag")
    values.pop("model_tag", None)
    spec = values.get("speculative_config")
    for dest, key in options.spec_flags.items():
        if values.get(dest) is None:
            continue
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            break
        if key in spec:
            flag = "--" + dest.replace("_", "-")
            raise UserError(f"{origin}: {flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = values[dest]
    if isinstance(spec, dict):
        values["speculative_config"] = {str(k).replace("-", "_"): v for k, v in spec.items()}
    attention = values.get("attention_config")
    both = isinstance(attention, dict) and attention.get("backend") is not None
    if values.get("attention_backend") is not None and both:
        raise UserError(f"{origin}: attention_backend and attention_config.backend are mutually exclusive")

"""Project configuration: [tool.specguard] in pyproject.toml, validated, merged with CLI options.

Like the packs, the settings are a plain frozen dataclass that pydantic validates (unknown keys are errors that
suggest the closest valid key), and a validated table is reused from the snapshot cache while its text is
unchanged, so a run whose configuration did not change never imports pydantic.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard._files import DATA_CAP, UnreadableFile, read_regular_stat
from specguard._snapshots import user_cache_home, validated
from specguard._toml import load_toml, toml_text
from specguard.errors import UserError
from specguard.ownership import untrusted_found
from specguard.program.discover import DEFAULT_EXCLUDE
from specguard.project import project_top


@dataclass(frozen=True)
class Selection:
    """One layer of code selection, as ruff layers them: the configuration's, then the command line's.

    Within a layer the most specific selector that matches a code decides (`SG103` over `SG1` over `ALL`; at equal
    specificity `ignore` wins); a layer with `select` starts over, one without it adjusts the layers before it."""

    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _normalize(self, ("select", "ignore", "extend_select"))


def _normalize(obj: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None:
            object.__setattr__(obj, name, _normalized(value))


def _normalized(selectors: list[str]) -> list[str]:
    return [s.strip().upper() for s in selectors]


def _specificity(selector: str) -> int:
    return 0 if selector == "ALL" else len(selector)


def _matches(code: str, selector: str, choosing: bool = False) -> bool:
    """The same in every key (select, ignore, fixable, per-file-ignores...). `ALL` means every rule; it chooses
    SG000 too (`--select ALL` reports unreadable files), but never hides it: only a selector naming it does."""
    return code.startswith(selector) or (selector == "ALL" and (code != "SG000" or choosing))


def _chosen(code: str, layers: list[Selection]) -> bool:
    """Whether the layers, applied in order, leave `code` chosen (everything is, before the first layer)."""
    chosen, carried = True, []
    for layer in layers:
        on = [s for s in [*(layer.select or []), *layer.extend_select] if _matches(code, s, choosing=True)]
        off = [s for s in [*layer.ignore, *carried] if _matches(code, s)]
        # the decisive selector: the most specific; at equal specificity an ignore (True sorts after False)
        decisive = max([(_specificity(s), False) for s in on] + [(_specificity(s), True) for s in off], default=None)
        if layer.select is not None:
            chosen = decisive is not None and not decisive[1]
        elif decisive is not None:
            chosen = not decisive[1]
        # as in ruff, `select = []` with ignores hands the ignores on to the next layer
        carried = layer.ignore if layer.select == [] and not layer.extend_select else []
    return chosen


def _doc(meaning: str) -> dict[str, str]:
    """A key's meaning, where pydantic keeps it as the field's description; docs/settings.md is generated from it."""
    return {"description": meaning}


@dataclass(frozen=True)
class Settings:
    """What `specguard check` runs and how. Keys are written with dashes in pyproject.toml."""

    __pydantic_config__ = {"extra": "forbid"}

    select: list[str] | None = field(
        default=None,
        metadata=_doc("Rule codes or prefixes to run (`ALL`: every rule); unset, every rule runs."),
    )
    ignore: list[str] = field(
        default_factory=list,
        metadata=_doc(
            "Codes or prefixes not to run. The most specific selector that matches a code decides (`SG103` over "
            "`SG1` over `ALL`); at equal specificity `ignore` wins."
        ),
    )
    extend_select: list[str] = field(
        default_factory=list, metadata=_doc("Codes or prefixes to run besides those `select` chooses.")
    )
    exclude: list[str] = field(
        default_factory=lambda: list(DEFAULT_EXCLUDE),
        metadata=_doc(
            "fnmatch patterns of files and folders not to check, matched against a name or the path from the "
            "configuration root; setting it replaces the default list (`extend-exclude` adds to it)."
        ),
    )
    extend_exclude: list[str] = field(
        default_factory=list, metadata=_doc("Patterns not to check, besides those of `exclude`.")
    )
    force_exclude: bool = field(
        default=False,
        metadata=_doc(
            "Apply the excludes to files named on the command line too, as pre-commit names them (the hook "
            "passes `--force-exclude`)."
        ),
    )
    respect_gitignore: bool = field(
        default=True,
        metadata=_doc(
            "Skip what `.gitignore` files (inside a git repository), `.git/info/exclude` and `.ignore` files "
            "exclude, read as git reads them."
        ),
    )
    per_file_ignores: dict[str, list[str]] = field(
        default_factory=dict,
        metadata=_doc('Codes or prefixes not to report in the files a pattern matches: `{ "legacy/*" = ["SG103"] }`.'),
    )
    rule_packs: list[Path] = field(
        default_factory=list,
        metadata=_doc("Rule packs (TOML) that adapt the rules to a fork, relative to the configuration root."),
    )
    builtin_packs: list[str] | None = field(
        default=None,
        metadata=_doc(
            "The built-in rule packs to read, and so the frameworks whose rules run: `vllm` (the base every other "
            "pack is laid over; its FlashInfer names are SGLang's too) and `sglang` (SG106, SG203). Unset: `vllm`, "
            "with `sglang` unless every checked path is vLLM's (inside a `vllm` package, or a folder holding one "
            "and no `sglang`/`python/sglang`). A fork's `rule-packs` are laid over them."
        ),
    )
    cache_dir: Path | None = field(
        default=None,
        metadata=_doc(
            "Where the analysis cache is kept, relative to the configuration root; unset, `.specguard_cache` there."
        ),
    )
    fix: bool = field(default=False, metadata=_doc("Apply the safe fixes in place, as `--fix` does."))
    unsafe_fixes: bool | None = field(
        default=None,
        metadata=_doc(
            "`true`: `fix` applies the unsafe fixes too; `false`: they are not even mentioned; unset, they are "
            "shown as available and not applied."
        ),
    )
    fixable: list[str] | None = field(
        default=None, metadata=_doc("Codes or prefixes whose findings `--fix` may fix; unset, every rule's.")
    )
    unfixable: list[str] = field(default_factory=list, metadata=_doc("Codes or prefixes never to fix."))
    output_format: str | None = field(
        default=None,
        metadata=_doc(
            "The report's format when `--output-format` and `SPECGUARD_OUTPUT_FORMAT` do not name one (as ruff's "
            "`output-format`): `concise`, `full`, `grouped`, `json`, `sarif`, `github`, `gitlab`, `pylint` or "
            "`junit`; unset, `concise`."
        ),
    )
    # Not keys. The folder relative paths in the settings are resolved against (the pyproject's folder), and the
    # command line's layers of selection (--select/--ignore/--extend-select, --fixable/--unfixable).
    root: Path = field(default_factory=Path.cwd)
    cli_rules: Selection = field(default_factory=Selection)
    cli_fixes: Selection = field(default_factory=Selection)

    def __post_init__(self) -> None:
        _normalize(self, _SELECTOR_KEYS)
        ignores = {pattern: _normalized(codes) for pattern, codes in self.per_file_ignores.items()}
        object.__setattr__(self, "per_file_ignores", ignores)

    def enabled(self, all_codes: list[str]) -> set[str]:
        """Codes that run: the configuration's selection, then the command line's, as ruff resolves them."""
        layers = [Selection(self.select, self.ignore, self.extend_select), self.cli_rules]
        return {code for code in all_codes if _chosen(code, layers)}

    def is_fixable(self, code: str) -> bool:
        """Whether `--fix` may fix this code's findings: fixable (default all) and unfixable, resolved as selections."""
        return _chosen(code, [Selection(self.fixable, self.unfixable), self.cli_fixes])

    def selectors(self) -> list[str]:
        """Every code selector the configuration and the command line name (per-file-ignores too), for validation."""
        layers = [
            Selection(self.select, self.ignore, self.extend_select),
            Selection(self.fixable, self.unfixable),
            self.cli_rules,
            self.cli_fixes,
        ]
        named = [s for layer in layers for s in [*(layer.select or []), *layer.ignore, *layer.extend_select]]
        return named + [s for codes in self.per_file_ignores.values() for s in codes]

    def relative(self, path: str | Path) -> str:
        """A path as `exclude`, `per-file-ignores` and baselines see it: relative to the configuration root,
        whichever way it was typed; absolute (resolved) for a file outside the root."""
        return path_from(self.root, path)

    def fingerprint(self) -> str:
        """What the analysis cache is keyed by: everything that changes which findings a file gets."""
        data = {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_ANALYSIS}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


_SELECTOR_KEYS = ("select", "ignore", "extend_select", "fixable", "unfixable")


def selects(selectors: list[str], code: str) -> bool:
    """Whether a list of codes and prefixes takes in `code`, as per-file-ignores reads them (select and the other
    keys read them in layers, through the same match)."""
    return any(_matches(code, s) for s in selectors)


def path_from(root: Path, path: str | Path) -> str:
    """`path` relative to `root` (posix), whichever way it was typed; absolute (resolved) when outside `root`."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


# Settings that change what is done with the findings, not which findings a file gets.
_NOT_ANALYSIS = ("root", "cache_dir", "fix", "unsafe_fixes", "fixable", "unfixable", "cli_fixes")
# The fields that are [tool.specguard] keys, in the order docs/settings.md lists them.
KEY_FIELDS = [f for f in dataclasses.fields(Settings) if f.name not in ("root", "cli_rules", "cli_fixes")]
_KEYS = sorted(f.name.replace("_", "-") for f in KEY_FIELDS)


def _unknown_key_message(key: str, origin: str) -> str:
    close = difflib.get_close_matches(key, _KEYS, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(_KEYS)}"
    return f"{origin}: unknown key '{key}' in [tool.specguard]{hint}"


def _validate(raw: dict[str, Any], root: Path, origin: str) -> Settings:
    from pydantic import TypeAdapter, ValidationError

    for key in raw:
        if key not in _KEYS:
            raise UserError(_unknown_key_message(key, origin))
    _reject_empty_codes(raw, origin)
    try:
        settings = TypeAdapter(Settings).validate_python(
            {**{k.replace("-", "_"): v for k, v in raw.items()}, "root": root}
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p).replace("_", "-") for p in err["loc"])
        raise UserError(f"{origin}: [tool.specguard] key '{key}': {err['msg']}") from None
    packs = [p if p.is_absolute() else root / p for p in settings.rule_packs]
    cache = settings.cache_dir
    if cache is not None and not cache.is_absolute():
        cache = root / cache
    return dataclasses.replace(settings, rule_packs=packs, cache_dir=cache)


def _reject_empty_codes(raw: dict[str, Any], origin: str) -> None:
    """An empty string among the codes would be a prefix of every code: `select = [""]` ran every rule and an
    ignore of it would skip them all, silently."""
    lists = [(key.replace("_", "-"), raw.get(key.replace("_", "-"))) for key in _SELECTOR_KEYS]
    table = raw.get("per-file-ignores")
    if isinstance(table, dict):
        lists += [(f"per-file-ignores.{pattern}", codes) for pattern, codes in table.items()]
    for key, codes in lists:
        if isinstance(codes, list) and any(isinstance(c, str) and not c.strip() for c in codes):
            raise UserError(
                f"{origin}: [tool.specguard] key '{key}': an empty rule code; list codes or prefixes "
                "(`specguard rules` shows them), or ALL"
            )


def settings_from_mapping(raw: dict[str, Any], *, root: Path, origin: str) -> Settings:
    material = [json.dumps(raw, sort_keys=True, default=str).encode(), str(root).encode(), origin.encode()]
    return validated("settings", material, Settings, lambda: _validate(raw, root, origin))


def cache_outside_project(settings: Settings) -> str | None:
    """The real path of a configured `cache-dir` that does not lie inside the project (its real path under the real
    root, symlinks followed); None for one inside, or none configured."""
    if settings.cache_dir is None:
        return None
    root, real = os.path.realpath(settings.root), os.path.realpath(settings.cache_dir)
    return None if real.startswith(root.rstrip(os.sep) + os.sep) else real


def require_cache_inside_project(settings: Settings) -> None:
    """A `cache-dir` read from a project's configuration must lie inside the project: the repository being checked
    does not choose where specguard writes (nor, for `specguard clean`, what it removes)."""
    if settings.cache_dir is not None and (real := cache_outside_project(settings)) is not None:
        root = os.path.realpath(settings.root)
        raw = _written(settings.cache_dir, settings.root)
        raise UserError(
            f"[tool.specguard] cache-dir '{raw}' must lie inside the project ({root}), but is {real}: a project's "
            "configuration may put the cache only there; pass --cache-dir to choose another place, or --no-cache"
        )


def _written(cache_dir: Path, root: Path) -> str:
    """The cache-dir as the configuration spelled it (relative ones were joined to the root)."""
    try:
        return cache_dir.relative_to(root).as_posix()
    except ValueError:
        return str(cache_dir)


def user_cache_dir() -> Path:
    """Where runs over a tree that is not the user's project (an installed vLLM) keep their cache."""
    return user_cache_home() / "check"


def served_tree_settings(root: Path) -> Settings:
    """How a served vLLM tree is checked (`specguard config`, `doctor`): every module Python would import, so no
    excludes and no ignore files (an installed vLLM lies under `site-packages`, a vendored one may sit in a folder
    the user's `.gitignore` names), the cache in the user's cache rather than in the tree."""
    return Settings(exclude=[], respect_gitignore=False, root=root, cache_dir=user_cache_dir())


@dataclass(frozen=True)
class FoundSettings:
    """What settings discovery found above a path: the project's root (None when no folder up to `/` holds `.git`
    or a pyproject.toml), its pyproject.toml when that holds a [tool.specguard] table that may be used, and the
    warning for one that may not."""

    root: Path | None
    config: Path | None = None
    warning: str | None = None


def discover_settings(start: Path) -> FoundSettings:
    """The [tool.specguard] of the project `start` lies in: only its root's pyproject.toml is looked at (never a
    folder above the root: the nearest holding `.git` or a pyproject.toml, with or without the table), and only when
    the user (or root) owns it and no one else may write it."""
    here = start.resolve()
    if not here.is_dir():
        here = here.parent
    top = project_top(str(here))
    if top is None:
        return FoundSettings(None)
    return _settings_in(Path(top)) or FoundSettings(Path(top))


def _settings_in(folder: Path) -> FoundSettings | None:
    """`folder`'s pyproject.toml when it holds [tool.specguard] (or a warning where it may not be read); None
    when it has none, or no such table."""
    candidate = folder / "pyproject.toml"
    if not candidate.is_file():  # none, a folder, a FIFO, a broken link: no settings here
        return None
    try:
        text, st = read_regular_stat(candidate, DATA_CAP)
    except UnreadableFile as exc:  # a huge one, or one that stopped being a regular file meanwhile
        raise UserError(f"{candidate}: cannot read configuration: {exc.reason}") from None
    try:
        decoded: str | None = toml_text(text, origin=str(candidate), what="configuration")
    except UserError:
        decoded = None  # refused below, unless no one may use it anyway
    if decoded is not None and "[tool.specguard" not in decoded:
        return None
    why = untrusted_found(candidate, st)
    if why is not None:
        warning = (
            f"{candidate} was not read ({why}): someone else may have written its [tool.specguard]; pass "
            f"`--config {candidate}` to use it anyway"
        )
        return FoundSettings(folder, warning=warning)
    if decoded is None:  # whether it holds [tool.specguard] cannot be told: never a silent run without it
        toml_text(text, origin=str(candidate), what="configuration")
    return FoundSettings(folder, candidate)


def find_pyproject(start: Path) -> Path | None:
    """The pyproject.toml whose [tool.specguard] applies to `start`, if any (see `discover_settings`)."""
    return discover_settings(start).config


def load_settings(config: Path | None, first_path: Path, warnings: list[str] | None = None) -> Settings:
    """Settings from --config FILE, else from the project's pyproject.toml, else the defaults (rooted at the
    project's root, else the current folder). A settings file discovery would not use is said in `warnings`."""
    source = config
    if source is None:
        found = discover_settings(first_path)
        if found.warning is not None and warnings is not None:
            warnings.append(found.warning)
        if found.config is None:
            return Settings(root=found.root or Path.cwd())
        source = found.config
    data = load_toml(source, what="configuration")
    in_pyproject = source.name == "pyproject.toml" or "tool" in data
    table = data.get("tool", {}).get("specguard", {}) if in_pyproject else data
    if not isinstance(table, dict):
        raise UserError(f"{source}: [tool.specguard] must be a table")
    settings = settings_from_mapping(table, root=source.resolve().parent, origin=str(source))
    return _trusted_packs(settings, source, warnings)


def _trusted_packs(settings: Settings, source: Path, warnings: list[str] | None) -> Settings:
    """The settings without the rule packs they name that someone else may have written (a pack renames what the
    rules look for, so a planted one blinds the run): each dropped is said in `warnings`. A pack named by
    `--rule-pack` is the user's own choice and is not checked."""
    kept = []
    for pack in settings.rule_packs:
        try:
            st = os.stat(pack)
        except OSError:
            kept.append(pack)  # missing or unreadable: loading it says so
            continue
        why = untrusted_found(pack, st)
        if why is None:
            kept.append(pack)
        elif warnings is not None:
            warnings.append(
                f"rule pack {pack}, named in {source}, was not read ({why}): someone else may have written it; "
                f"pass `--rule-pack {pack}` to use it anyway"
            )
    return settings if len(kept) == len(settings.rule_packs) else dataclasses.replace(settings, rule_packs=kept)

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

from specguard._files import DATA_CAP, UnreadableFile, read_regular
from specguard._snapshots import user_cache_home, validated
from specguard._toml import load_toml
from specguard.errors import UserError


@dataclass(frozen=True)
class Settings:
    """What `specguard check` runs and how. Keys are written with dashes in pyproject.toml."""

    __pydantic_config__ = {"extra": "forbid"}

    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    # apply `exclude` to files named on the command line too (as pre-commit passes them), like ruff's
    force_exclude: bool = False
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    rule_packs: list[Path] = field(default_factory=list)
    cache_dir: Path | None = None
    # Fixes, as in ruff: `fix` applies them, `unsafe-fixes` also the unsafe ones (false: not even mentioned),
    # `fixable`/`unfixable` choose the codes (default all; prefixes match, as in select).
    fix: bool = False
    unsafe_fixes: bool | None = None
    fixable: list[str] | None = None
    unfixable: list[str] = field(default_factory=list)
    # The folder relative paths in the settings are resolved against (the pyproject's folder); not a key.
    root: Path = field(default_factory=Path.cwd)

    def __post_init__(self) -> None:
        for name in _SELECTOR_KEYS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _normalized(value))
        ignores = {pattern: _normalized(codes) for pattern, codes in self.per_file_ignores.items()}
        object.__setattr__(self, "per_file_ignores", ignores)

    def enabled(self, all_codes: list[str]) -> set[str]:
        """Codes that run: select (default all) plus extend-select, minus ignore; prefixes match (SG1)."""

        def expand(selectors: list[str]) -> set[str]:
            return {c for c in all_codes if selects(selectors, c)}

        chosen = expand(self.select) if self.select is not None else set(all_codes)
        return (chosen | expand(self.extend_select)) - expand(self.ignore)

    def is_fixable(self, code: str) -> bool:
        """Whether `--fix` may fix this code's findings: fixable (default all) minus unfixable."""
        return (self.fixable is None or selects(self.fixable, code)) and not selects(self.unfixable, code)

    def selectors(self) -> list[str]:
        """Every code or prefix the settings name, in every key that takes them."""
        named = [s for key in _SELECTOR_KEYS for s in getattr(self, key) or []]
        return named + [s for codes in self.per_file_ignores.values() for s in codes]

    def relative(self, path: str | Path) -> str:
        """A path as `exclude`, `per-file-ignores` and baselines see it: relative to the configuration root,
        whichever way it was typed; absolute (resolved) for a file outside the root."""
        resolved = Path(path).resolve()
        try:
            return resolved.relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return resolved.as_posix()

    def fingerprint(self) -> str:
        """What the analysis cache is keyed by: everything that changes which findings a file gets."""
        data = {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_ANALYSIS}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


_SELECTOR_KEYS = ("select", "ignore", "extend_select", "fixable", "unfixable")


def _normalized(selectors: list[str]) -> list[str]:
    return [s.strip().upper() for s in selectors]


def selects(selectors: list[str], code: str) -> bool:
    """Whether a list of codes and prefixes takes in `code` (the same in every key: select, ignore,
    per-file-ignores...). `ALL` means every rule, not SG000, which only a per-file-ignores entry naming it hides."""
    return any(code.startswith(s) or (s == "ALL" and code != "SG000") for s in selectors)


# Settings that change what is done with the findings, not which findings a file gets.
_NOT_ANALYSIS = ("root", "cache_dir", "fix", "unsafe_fixes", "fixable", "unfixable")
_KEYS = sorted(f.name.replace("_", "-") for f in dataclasses.fields(Settings) if f.name != "root")


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


def require_cache_inside_project(settings: Settings) -> None:
    """A `cache-dir` read from a project's configuration must lie inside the project (its real path under the real
    root, symlinks followed): the repository being checked does not choose where specguard writes."""
    if settings.cache_dir is None:
        return
    root, real = os.path.realpath(settings.root), os.path.realpath(settings.cache_dir)
    if not real.startswith(root.rstrip(os.sep) + os.sep):
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


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.specguard] table, walking up from `start`."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = read_regular(candidate, DATA_CAP)
            except UnreadableFile as exc:  # a huge one, or one that stopped being a regular file meanwhile
                raise UserError(f"{candidate}: cannot read configuration: {exc.reason}") from None
            if b"[tool.specguard" in text:
                return candidate
    return None


def project_root(start: Path) -> Path:
    """Where a project without [tool.specguard] is rooted: the nearest folder at or above `start` holding a
    pyproject.toml or .git, else the current folder. The same whichever path inside the project is checked."""
    here = start.resolve()
    if not here.is_dir():
        here = here.parent
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() or (folder / ".git").exists():
            return folder
    return Path.cwd()


def load_settings(config: Path | None, first_path: Path) -> Settings:
    """Settings from --config FILE, else from the nearest pyproject.toml, else the defaults."""
    source = config if config is not None else find_pyproject(first_path)
    if source is None:
        return Settings(root=project_root(first_path))
    data = load_toml(source, what="configuration")
    in_pyproject = source.name == "pyproject.toml" or "tool" in data
    table = data.get("tool", {}).get("specguard", {}) if in_pyproject else data
    if not isinstance(table, dict):
        raise UserError(f"{source}: [tool.specguard] must be a table")
    return settings_from_mapping(table, root=source.resolve().parent, origin=str(source))

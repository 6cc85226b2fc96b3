"""Project configuration: [tool.specguard] in pyproject.toml, validated, merged with CLI options."""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specguard._toml import load_toml
from specguard.errors import UserError


class Settings(BaseModel):
    """What `specguard check` runs and how. Keys are written with dashes in pyproject.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    select: list[str] | None = None
    ignore: list[str] = Field(default_factory=list)
    extend_select: list[str] = Field(default_factory=list, alias="extend-select")
    exclude: list[str] = Field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = Field(default_factory=dict, alias="per-file-ignores")
    rule_packs: list[Path] = Field(default_factory=list, alias="rule-packs")
    cache_dir: Path | None = Field(default=None, alias="cache-dir")
    # Directory that relative paths in the settings are resolved against (the pyproject's folder).
    root: Path = Field(default_factory=Path.cwd, exclude=True)

    @field_validator("select", "ignore", "extend_select")
    @classmethod
    def _codes_upper(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [c.strip().upper() for c in v]

    def enabled(self, all_codes: list[str]) -> set[str]:
        """Codes that run: select (default all) plus extend-select, minus ignore; prefixes match (SG1)."""

        def expand(selectors: list[str]) -> set[str]:
            return {c for c in all_codes for s in selectors if c.startswith(s) or s == "ALL"}

        chosen = expand(self.select) if self.select is not None else set(all_codes)
        return (chosen | expand(self.extend_select)) - expand(self.ignore)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json(exclude={"cache_dir"}).encode()).hexdigest()[:16]


_KEYS = sorted({(f.alias or name) for name, f in Settings.model_fields.items() if name != "root"})


def _unknown_key_message(key: str, origin: str) -> str:
    close = difflib.get_close_matches(key, _KEYS, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(_KEYS)}"
    return f"{origin}: unknown key '{key}' in [tool.specguard]{hint}"


def settings_from_mapping(raw: dict[str, Any], *, root: Path, origin: str) -> Settings:
    for key in raw:
        if key not in _KEYS:
            raise UserError(_unknown_key_message(key, origin))
    try:
        settings = Settings.model_validate({**raw, "root": root})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{origin}: [tool.specguard] key '{key}': {err['msg']}") from None
    packs = [p if p.is_absolute() else root / p for p in settings.rule_packs]
    cache = settings.cache_dir
    if cache is not None and not cache.is_absolute():
        cache = root / cache
    return settings.model_copy(update={"rule_packs": packs, "cache_dir": cache})


def user_cache_dir() -> Path:
    """Where runs over a tree that is not the user's project (an installed vLLM) keep their cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specguard" / "check"


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.specguard] table, walking up from `start`."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                if "[tool.specguard" in candidate.read_text(encoding="utf-8", errors="replace"):
                    return candidate
            except OSError:
                continue
    return None


def load_settings(config: Path | None, first_path: Path) -> Settings:
    """Settings from --config FILE, else from the nearest pyproject.toml, else the defaults."""
    source = config if config is not None else find_pyproject(first_path)
    if source is None:
        return Settings()
    data = load_toml(source, what="configuration")
    in_pyproject = source.name == "pyproject.toml" or "tool" in data
    table = data.get("tool", {}).get("specguard", {}) if in_pyproject else data
    if not isinstance(table, dict):
        raise UserError(f"{source}: [tool.specguard] must be a table")
    return settings_from_mapping(table, root=source.resolve().parent, origin=str(source))

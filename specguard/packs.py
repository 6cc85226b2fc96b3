"""Rule packs: the vLLM names the rules match, as validated data (rules/*.toml).

The built-in pack ships inside the wheel as `specguard._packs`; a fork's pack overlays it section by section:
lists extend (or replace, with `replace = true` in the section), strings override.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specguard._toml import load_toml
from specguard.errors import UserError

BUILTIN_PACK = "vllm.toml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    replace: bool = False


class PackInfo(_Section):
    name: str | None = None
    description: str | None = None


class Speculators(_Section):
    bases: list[str] = Field(default_factory=list)
    shared_helpers: list[str] = Field(default_factory=list)


class Metadata(_Section):
    sink: list[str] = Field(default_factory=list)
    token_count_params: list[str] = Field(default_factory=list)
    capture_keyword: str | None = None
    dcp_param: str | None = None


class Padding(_Section):
    descriptor_producers: list[str] = Field(default_factory=list)
    descriptor_types: list[str] = Field(default_factory=list)
    padded_attribute: str | None = None
    mode_attribute: str | None = None
    full_mode: str | None = None


class Dcp(_Section):
    prepare: list[str] = Field(default_factory=list)


class KvGroups(_Section):
    merge_methods: list[str] = Field(default_factory=list)
    spec_class_suffixes: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)


class Mla(_Section):
    decode_entry: list[str] = Field(default_factory=list)
    global_bound_param: str | None = None
    row_params: list[str] = Field(default_factory=list)
    row_expanders: list[str] = Field(default_factory=list)


class Pack(BaseModel):
    """One pack file, or the overlay of several. Every rule reads its names from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pack: PackInfo = PackInfo()
    speculators: Speculators = Speculators()
    metadata: Metadata = Metadata()
    padding: Padding = Padding()
    dcp: Dcp = Dcp()
    kv_groups: KvGroups = KvGroups()
    mla: Mla = Mla()

    @cached_property
    def fingerprint(self) -> str:
        """Content hash for the analysis cache: a changed name invalidates every cached result."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    @cached_property
    def needles(self) -> tuple[bytes, ...]:
        """Identifiers whose absence from a file proves no rule can match it (the prefilter)."""
        names = [
            *self.metadata.sink,
            *self.speculators.shared_helpers,
            *self.dcp.prepare,
            *self.kv_groups.flags,
            *self.mla.decode_entry,
        ]
        if self.mla.global_bound_param:
            names.append(self.mla.global_bound_param)
        return tuple(sorted({n.encode() for n in names if n}))

    @cached_property
    def needle_groups(self) -> tuple[tuple[bytes, ...], ...]:
        """The prefilter proper: a file can match only if it holds every needle of some group.

        A speculator rule needs one of its names; SG201 needs a flag and a merge method; SG202 the MLA entry and
        the global bound. Names that contain another (`_build_attn_metadata` holds `build_attn_metadata`) are
        left out, since the shorter one already admits the file.
        """
        singles = [*self.metadata.sink, *self.speculators.shared_helpers, *self.dcp.prepare]
        groups = {(n,) for n in singles if not any(o != n and o in n for o in singles)}
        groups |= {(f, m) for f in self.kv_groups.flags for m in self.kv_groups.merge_methods}
        groups |= {(e, self.mla.global_bound_param or "") for e in self.mla.decode_entry}
        return tuple(sorted(tuple(n.encode() for n in g) for g in groups))


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = {k: dict(v) for k, v in base.items()}
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
    try:
        return Pack.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        problem = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise UserError(f"{origin}: rule pack key '{key}': {problem}{more}") from None


def _read_pack(path: Path) -> dict[str, Any]:
    raw = load_toml(path, what="rule pack")
    _validate(raw, str(path))  # name the file that is wrong, not the merged result
    return raw


def builtin_pack_text() -> str:
    try:
        return resources.files("specguard._packs").joinpath(BUILTIN_PACK).read_text(encoding="utf-8")
    except ModuleNotFoundError:  # running from a source checkout that was never installed
        return (Path(__file__).resolve().parent.parent / "rules" / BUILTIN_PACK).read_text(encoding="utf-8")


def load_pack(extra: list[Path] | tuple[Path, ...] = ()) -> Pack:
    """The built-in vLLM pack with each extra pack laid over it in order."""
    from specguard._toml import parse_toml

    raw = parse_toml(builtin_pack_text(), origin=f"built-in {BUILTIN_PACK}", what="rule pack")
    for path in extra:
        raw = _overlay(raw, _read_pack(path))
    pack = _validate(raw, "merged rule packs")
    missing = [
        f"{section}.{key}"
        for section, values in json.loads(pack.model_dump_json()).items()
        for key, value in values.items()
        if value in (None, []) and key not in ("replace", "description")
    ]
    if missing:
        raise UserError(f"rule packs leave required keys empty: {', '.join(missing)}")
    return pack

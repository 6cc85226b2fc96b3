"""`specguard check --show-settings`: the settings a file is checked with, laid out as ruff's `--show-settings`."""

from __future__ import annotations

import argparse
from pathlib import Path

from specguard.report.names import shown
from specguard.rules import ALL_CODES, rule_name
from specguard.settings import Settings


def _value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Path):
        return f'"{shown(str(value))}"'
    if isinstance(value, str):
        return value
    return repr(value)


def _list(items: list[str]) -> str:
    if not items:
        return "[]"
    return "[\n" + "".join(f"\t{item},\n" for item in items) + "]"


def _quoted(items: list[str]) -> list[str]:
    return [f'"{shown(item)}"' for item in items]


def render_settings(settings: Settings, file: Path, source: Path | None, args: argparse.Namespace) -> str:
    rules = sorted(settings.enabled(ALL_CODES))
    unsafe = {None: "hint", True: "true", False: "false"}[settings.unsafe_fixes]
    cache_dir = settings.cache_dir or settings.root / ".specguard_cache"
    per_file = {pattern: sorted(codes) for pattern, codes in settings.per_file_ignores.items()}
    lines = [
        f"Resolved settings for: {_value(file)}",
        *([f"Settings path: {_value(source.resolve())}"] if source is not None else []),
        "",
        "# General Settings",
        f"cache_dir = {_value(cache_dir.resolve())}",
        f"fix = {_value(settings.fix)}",
        f"output_format = {'concise' if args.output_format == 'text' else args.output_format}",
        f"unsafe_fixes = {unsafe}",
        "",
        "# File Resolver Settings",
        f"file_resolver.exclude = {_list(_quoted(settings.exclude))}",
        f"file_resolver.extend_exclude = {_list(_quoted(settings.extend_exclude))}",
        f"file_resolver.force_exclude = {_value(settings.force_exclude)}",
        f"file_resolver.respect_gitignore = {_value(settings.respect_gitignore)}",
        f"file_resolver.project_root = {_value(settings.root.resolve())}",
        "",
        "# Linter Settings",
        # SG000 is reported whatever the selection, and never fixed
        f"linter.rules.enabled = {_list([f'{rule_name(c)} ({c})' for c in ['SG000', *rules]])}",
        f"linter.rules.should_fix = {_list([f'{rule_name(c)} ({c})' for c in rules if settings.is_fixable(c)])}",
        f"linter.per_file_ignores = {per_file}",
        f"linter.rule_packs = {_list(_quoted([str(p) for p in settings.rule_packs]))}",
    ]
    return "\n".join(lines)

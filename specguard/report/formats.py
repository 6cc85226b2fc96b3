"""The one place that picks the writer of each `--output-format` (check_cli.py's OUTPUT_FORMATS lists them, as the
command line takes them without importing these). The terminal formats (concise, grouped, full) may be coloured;
the others never are."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specguard.findings import Finding
from specguard.report import full, github, gitlab, grouped, json_format, junit, pylint, sarif, text
from specguard.report.paths import report_root
from specguard.report.sources import Sources
from specguard.report.style import Style


@dataclass(frozen=True)
class Report:
    """What a report needs besides the findings."""

    unsafe_fixes: bool | None
    fixed: int  # findings `--fix` fixed (the summary counts them)
    quiet: bool  # the findings and nothing else, as ruff's -q
    colour: bool  # the caller's decision: a terminal, NO_COLOR/FORCE_COLOR, no --output-file
    root: Path  # the configuration root; the CI formats' paths start at the repository's root above it
    fixes_made: list[str] = field(default_factory=list)  # `--show-fixes`' lines (text.fixes_made), if asked
    given: dict[str, str] = field(default_factory=dict)  # sources not on disk (standard input), by their path


TERMINAL_FORMATS = ("concise", "text", "full", "grouped")


def render(output_format: str, findings: list[Finding], report: Report) -> str:
    style = Style(report.colour)
    sources = Sources(report.given)
    if output_format in TERMINAL_FORMATS:
        if not report.fixes_made:
            return _terminal(output_format, findings, report, style, sources, report.quiet)
        # as ruff: the findings left, the fixes made, then the summary
        shown = _terminal(output_format, findings, report, style, sources, quiet=True)
        after = [] if report.quiet else text.summary(findings, report.unsafe_fixes, report.fixed, style)
        return "\n".join([*([shown] if shown else []), *report.fixes_made, *after])
    if output_format == "json":
        return json_format.render(findings, sources)
    if output_format == "pylint":
        return pylint.render(findings)
    if output_format == "junit":
        return junit.render(findings)
    repository = report_root(report.root)
    if output_format == "sarif":
        return sarif.render(findings, repository, sources)
    if output_format == "gitlab":
        return gitlab.render(findings, repository, sources)
    if output_format == "github":
        return github.render(findings, repository)
    raise ValueError(f"unknown output format {output_format!r}")


def _terminal(
    output_format: str, findings: list[Finding], report: Report, style: Style, sources: Sources, quiet: bool
) -> str:
    if output_format == "full":
        return full.render(findings, report.unsafe_fixes, report.fixed, quiet, style, sources)
    if output_format == "grouped":
        return grouped.render(findings, report.unsafe_fixes, report.fixed, quiet, style)
    return text.render(findings, report.unsafe_fixes, report.fixed, quiet=quiet, style=style)

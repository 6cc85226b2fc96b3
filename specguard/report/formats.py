"""The one place that picks the writer of each `--output-format` (check_cli.py's OUTPUT_FORMATS lists them, as the
command line takes them without importing these). The terminal formats (concise, grouped, full) may be coloured;
the others never are."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.findings import Finding

if TYPE_CHECKING:
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
    """The report in `output_format`. Each writer is imported when asked for: a warm run prints in one format, and
    importing all of them (junit's XML, SARIF's rule documentation) cost it a third of its time."""
    from specguard.report import text
    from specguard.report.sources import Sources
    from specguard.report.style import Style

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
        from specguard.report import json_format

        return json_format.render(findings, sources)
    if output_format == "pylint":
        from specguard.report import pylint

        return pylint.render(findings)
    if output_format == "junit":
        from specguard.report import junit

        return junit.render(findings)
    from specguard.report.paths import report_root

    repository = report_root(report.root)
    if output_format == "sarif":
        from specguard.report import sarif

        return sarif.render(findings, repository, sources)
    if output_format == "gitlab":
        from specguard.report import gitlab

        return gitlab.render(findings, repository, sources)
    if output_format == "github":
        from specguard.report import github

        return github.render(findings, repository)
    raise ValueError(f"unknown output format {output_format!r}")


def _terminal(
    output_format: str, findings: list[Finding], report: Report, style: Style, sources: Sources, quiet: bool
) -> str:
    if output_format == "full":
        from specguard.report import full

        return full.render(findings, report.unsafe_fixes, report.fixed, quiet, style, sources)
    if output_format == "grouped":
        from specguard.report import grouped

        return grouped.render(findings, report.unsafe_fixes, report.fixed, quiet, style)
    from specguard.report import text

    return text.render(findings, report.unsafe_fixes, report.fixed, quiet=quiet, style=style)

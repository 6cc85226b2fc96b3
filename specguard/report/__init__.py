"""Output formats. Each takes the findings and returns the text to print."""

from __future__ import annotations

from collections.abc import Callable

from specguard.analysis.findings import Finding
from specguard.report import github, json_format, sarif, text

FORMATS: dict[str, Callable[[list[Finding]], str]] = {
    "text": text.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
}

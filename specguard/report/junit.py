"""JUnit XML as ruff writes it: one `testsuite` per file (its absolute path), one `testcase` per finding (`name`
`org.specguard.CODE`, `classname` the path without `.py`, `line`, `column`) holding a `failure` with the whole
message; a report without findings is one passing testcase, as ruff's. What XML 1.0 cannot hold (a control
character, a byte of a name that is not UTF-8) is written as Python escapes it."""

from __future__ import annotations

import os
import re
from xml.sax.saxutils import escape, quoteattr

from specguard.findings import Finding
from specguard.report.names import decodable

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", decodable(value))


def _attr(value: str) -> str:
    return quoteattr(_text(value), {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def _case(f: Finding, classname: str) -> list[str]:
    where = f"line {f.line}, col {f.col}, "
    return [
        f"        <testcase name={_attr('org.specguard.' + f.code)} classname={_attr(classname)} "
        f'line="{f.line}" column="{f.col}">',
        "            <properties>",
        '                <property name="severity" value="error"/>',
        "            </properties>",
        f"            <failure message={_attr(f.message)}>{escape(_text(where + f.message))}</failure>",
        "        </testcase>",
    ]


def _suite(name: str, tests: int, failures: int) -> str:
    return (
        f'    <testsuite name={_attr(name)} tests="{tests}" skipped="0" errors="0" failures="{failures}" '
        'package="org.specguard">'
    )


def render(findings: list[Finding]) -> str:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>']
    tests = len(findings) or 1
    lines.append(f'<testsuites name="specguard" tests="{tests}" skipped="0" failures="{len(findings)}" errors="0">')
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        by_path.setdefault(os.path.abspath(f.path), []).append(f)
    for path, group in by_path.items():
        lines.append(_suite(path, len(group), len(group)))
        classname = os.path.splitext(path)[0]
        for f in group:
            lines += _case(f, classname)
        lines.append("    </testsuite>")
    if not findings:
        lines += [_suite("specguard", 1, 0), '        <testcase name="No errors found" classname="specguard"/>']
        lines.append("    </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines)

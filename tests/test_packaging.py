"""The wheel ships every package of the source tree: pyproject.toml lists them by hand (the rule packs are mapped
in from rules/), and a package missing from that list is missing from every non-editable install (pre-commit's)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "specguard").rglob("__init__.py")}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert listed - on_disk == {"specguard._packs"}


def test_test_modules_have_unique_basenames() -> None:
    # tests/ has no __init__.py files, so pytest imports each test module by its basename alone: two files with
    # one name in different folders stop the whole run at collection ("import file mismatch").
    seen: dict[str, Path] = {}
    for module in sorted((REPO / "tests").rglob("test_*.py")):
        assert module.name not in seen, f"rename one of {seen[module.name]} and {module}: pytest cannot import both"
        seen[module.name] = module

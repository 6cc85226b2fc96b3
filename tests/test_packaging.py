"""The wheel ships every package of the source tree: pyproject.toml lists them by hand (the rule packs are mapped
in from rules/), and a package missing from that list is missing from every non-editable install (pre-commit's).
It is built here as a release would be: no deprecation warning, the license and py.typed inside, the metadata an
index accepts."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
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


def _build_wheel(tmp_path: Path) -> tuple[Path, str]:
    """The wheel, built from a copy of what it is made of by the build backend pyproject.toml names, and what the
    build printed (warnings included)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    for folder in ("specguard", "rules"):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-W", "always", "-c", f"import setuptools.build_meta as b; b.build_wheel({str(out)!r})"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("specguard-*.whl")
    return wheel, build.stdout + build.stderr


def test_the_wheel_builds_without_warnings_and_ships_license_types_and_metadata(tmp_path: Path) -> None:
    import trove_classifiers
    from packaging.requirements import Requirement

    from specguard.report.docs_url import DOCS, REPOSITORY

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    (needed,) = [Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    assert needed.specifier.contains(metadata.version("setuptools"))  # built with a backend the project accepts

    wheel, log = _build_wheel(tmp_path)
    assert re.findall(r"\w+Warning\b", log) == []  # no SetuptoolsDeprecationWarning (e.g. a `license` table)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rpartition("/")[0]
        assert zf.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
        assert zf.read("specguard/py.typed") == b""
        meta = email.message_from_bytes(zf.read(f"{info}/METADATA"))
    assert "Version 2.0, January 2004" in (REPO / "LICENSE").read_text()  # the Apache License's own text
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues"} and urls["Documentation"] == DOCS
    assert urls["Homepage"] == urls["Repository"] == REPOSITORY and urls["Issues"] == f"{REPOSITORY}/issues"
    classifiers = meta.get_all("Classifier")
    assert classifiers and all(c in trove_classifiers.classifiers for c in classifiers)
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it, once
    assert "vllm" in meta["Keywords"].split(",")

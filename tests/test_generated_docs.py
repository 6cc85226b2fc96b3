"""docs/ as committed is what `python -m specguard.docs` writes from the rule modules, the hazard catalogue and the
settings model, and every link specguard prints, or the pages hold, leads to a page that exists."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from specguard.report.docs_url import DOCS, PAGES, hazard_page, rule_page
from specguard.rules import ALL_CODES

REPO = Path(__file__).resolve().parent.parent
REGENERATE = "python -m specguard.docs"
URL = re.compile(r"https?://[^\s\"'<>()\[\]`]+")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def generate(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specguard.docs", *args, str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder.parent,  # the generator reads nothing from the repository around it
    )


def test_the_committed_docs_are_what_the_generator_writes(tmp_path: Path) -> None:
    fresh = tmp_path / "docs"
    done = generate(fresh)
    assert done.returncode == 0, done.stderr
    written = {p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file()}

    def differs(name: str) -> bool:
        committed = REPO / "docs" / name
        return not committed.is_file() or committed.read_text(encoding="utf-8") != (fresh / name).read_text("utf-8")

    stale = sorted(name for name in written if differs(name))
    assert not stale, f"docs/ is out of date ({', '.join(sorted(stale))}): run `{REGENERATE}` and commit docs/"
    left_over = [
        p.relative_to(REPO / "docs").as_posix()
        for folder in ("rules", "hazards")
        for p in (REPO / "docs" / folder).iterdir()
        if p.relative_to(REPO / "docs").as_posix() not in written
    ]
    assert not left_over, f"docs/ holds pages no rule or hazard has ({left_over}): run `{REGENERATE}`"
    # one page per rule and per hazard, where the JSON `url`, SARIF `helpUri` and the indexes point
    from specguard.deploy.catalogue import load_catalogue

    assert {rule_page(c) for c in ["SG000", *ALL_CODES]} | {hazard_page(c) for c in load_catalogue().hazards} <= written


def test_check_mode_names_a_page_that_differs_and_passes_on_the_committed_docs(tmp_path: Path) -> None:
    assert generate(REPO / "docs", "--check").returncode == 0
    copy = tmp_path / "docs"
    assert generate(copy).returncode == 0
    page = copy / rule_page("SG103")
    page.write_text(page.read_text().replace("## Why is this bad?", "## Why"))
    (copy / "rules" / "SG999.md").write_text("# gone\n")
    checked = generate(copy, "--check")
    assert checked.returncode == 1
    assert f"{page}: out of date (run `{REGENERATE}`)" in checked.stderr
    assert "SG999.md: out of date" in checked.stderr
    assert "SG101.md" not in checked.stderr


def _urls(text: str) -> set[str]:
    return {u.rstrip(".,;:") for u in URL.findall(text)}


def _page_for(url: str) -> Path:
    assert url.startswith(PAGES), f"specguard prints {url}, which is not a page of its documentation ({PAGES}...)"
    path, _, anchor = url.removeprefix(PAGES).partition("#")
    page = REPO / "docs" / path
    assert page.is_file(), f"{url} leads to docs/{path}, which does not exist"
    if anchor:
        headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
        slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, f"{url}: docs/{path} has no heading #{anchor}"
    return page


def test_every_link_the_cli_prints_leads_to_a_page_in_docs(cli) -> None:  # type: ignore[no-untyped-def]
    examples = str(REPO / "examples")
    printed: list[str] = []
    for fmt in ("concise", "json", "github"):
        printed.append(cli("check", examples, "--output-format", fmt, "--no-cache").stdout)
    printed.append(cli("check", examples, "--statistics", "--no-cache").stdout)
    printed.append(cli("check", examples, "--statistics", "--output-format", "json", "--no-cache").stdout)
    printed += [cli(*args).stdout for args in (["rules"], ["--help"], ["check", "--help"], ["config", "--help"])]
    printed += [cli("explain", code).stdout for code in ["SG000", *ALL_CODES]]
    for fmt in ("text", "json"):
        done = cli("config", str(REPO / "examples" / "configs" / "dflash-dp2.yaml"), "--format", fmt)
        printed += [done.stdout, done.stderr]

    findings = json.loads(cli("check", examples, "--output-format", "json", "--no-cache").stdout)
    assert findings and all(f["url"] == PAGES + rule_page(f["code"]) for f in findings)
    sarif = json.loads(cli("check", examples, "--output-format", "sarif", "--no-cache").stdout)
    sarif.pop("$schema")  # the format's schema, not a page of specguard's: SARIF requires it
    driver = sarif["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == DOCS
    assert {r["id"]: r["helpUri"] for r in driver["rules"]} == {
        code: PAGES + rule_page(code) for code in ["SG000", *ALL_CODES]
    }
    printed.append(json.dumps(sarif))

    urls = set().union(*map(_urls, printed))
    assert PAGES + rule_page("SG103") in urls and DOCS in urls
    for url in sorted(urls):
        _page_for(url)


def test_links_in_the_docs_and_the_readme_lead_to_files_that_exist() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        for target in MARKDOWN_LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = (page.parent / target.partition("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"


def test_the_settings_pages_example_is_a_valid_configuration() -> None:
    from specguard._toml import parse_toml
    from specguard.settings import settings_from_mapping

    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```toml\n(.*?)```", page, flags=re.DOTALL)
    table = parse_toml(block, origin="docs/settings.md", what="configuration")["tool"]["specguard"]
    settings = settings_from_mapping(table, root=REPO, origin="docs/settings.md")
    assert settings.select == ["SG1", "SG2"] and settings.ignore == ["SG104"]

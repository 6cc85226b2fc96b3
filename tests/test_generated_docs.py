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


FENCED = re.compile(r"^```.*?^```$", flags=re.MULTILINE | re.DOTALL)


def _prose(page: Path) -> str:
    """A markdown page without its fenced code blocks: a `#` line there is no heading, nor `[x](y)` a link."""
    return FENCED.sub("", page.read_text(encoding="utf-8"))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but `-` dropped, spaces as `-`."""
    headings = re.findall(r"^#+ (.+)$", _prose(page), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def _page_for(url: str) -> Path:
    assert url.startswith(PAGES), f"specguard prints {url}, which is not a page of its documentation ({PAGES}...)"
    path, _, anchor = url.removeprefix(PAGES).partition("#")
    page = REPO / "docs" / path
    assert page.is_file(), f"{url} leads to docs/{path}, which does not exist"
    if anchor:
        assert anchor in _anchors(page), f"{url}: docs/{path} has no heading #{anchor}"
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


# Every page of documentation the repository holds: the README, the contributors' pages and docs/.
PAGES_HELD = [
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]


def _links(page: Path) -> list[str]:
    return MARKDOWN_LINK.findall(_prose(page))


def test_links_in_the_docs_and_the_readme_lead_to_files_and_headings_that_exist() -> None:
    for page in PAGES_HELD:
        for target in _links(page):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"
            if anchor:
                assert linked.suffix == ".md" and anchor in _anchors(linked), (
                    f"{page.relative_to(REPO)} links to {target}: {linked.relative_to(REPO)} has no heading #{anchor}"
                )


def test_a_reader_finds_every_page_from_the_readme_and_from_the_docs_index() -> None:
    """Each page written by hand, and each generated index, is linked from the README and from docs/README.md;
    the rule and hazard pages are reached through their indexes."""
    generated_pages = {"rules", "hazards"}
    pages = {p for p in (REPO / "docs").rglob("*.md") if p.parent.name not in generated_pages or p.name == "README.md"}
    pages = (pages - {REPO / "docs" / "README.md"}) | {REPO / "CONTRIBUTING.md"}
    for index in (REPO / "README.md", REPO / "docs" / "README.md"):
        reached = {(index.parent / t.partition("#")[0]).resolve() for t in _links(index) if "://" not in t}
        missing = sorted(p.relative_to(REPO).as_posix() for p in pages if p.resolve() not in reached)
        assert not missing, f"{index.relative_to(REPO)} does not link {missing}"
    for index in ("rules", "hazards"):
        reached = {t.partition("#")[0] for t in _links(REPO / "docs" / index / "README.md")}
        assert {p.name for p in (REPO / "docs" / index).glob("*.md")} - {"README.md"} <= reached


def test_the_settings_pages_example_is_a_valid_configuration() -> None:
    from specguard._toml import parse_toml
    from specguard.settings import settings_from_mapping

    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```toml\n(.*?)```", page, flags=re.DOTALL)
    table = parse_toml(block, origin="docs/settings.md", what="configuration")["tool"]["specguard"]
    settings = settings_from_mapping(table, root=REPO, origin="docs/settings.md")
    assert settings.select == ["SG1", "SG2"] and settings.ignore == ["SG104"]

"""Where specguard's documentation lives: the pages `python -m specguard.docs` writes into docs/, as the repository
serves them. JSON `url`, SARIF `helpUri` and `informationUri`, pyproject's Documentation URL (a test keeps them one)
and the generator's file names all come from here."""

REPOSITORY = "https://github.com/specguard/specguard"
PAGES = f"{REPOSITORY}/blob/main/docs/"
DOCS = PAGES + "README.md"


def rule_page(code: str) -> str:
    """A rule's page, relative to docs/ (SG000 included)."""
    return f"rules/{code}.md"


def hazard_page(code: str) -> str:
    """A config hazard's page, relative to docs/."""
    return f"hazards/{code}.md"


def rule_url(code: str) -> str:
    return PAGES + rule_page(code)

"""Where each rule's documentation lives, for JSON `url` and SARIF `helpUri`."""

DOCS = "https://github.com/specguard/specguard/blob/main/README.md"


def rule_url(code: str) -> str:
    return f"{DOCS}#{code.lower()}"

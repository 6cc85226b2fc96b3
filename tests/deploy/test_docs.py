"""The README's config section stays true to the catalogue (the examples table is checked in test_config_cli.py)."""

from __future__ import annotations

import re
from pathlib import Path

from specguard.deploy.catalogue import load_catalogue

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "README.md").read_text(encoding="utf-8")


def test_hazard_table_lists_every_code_with_its_severity() -> None:
    rows = dict(re.findall(r"^\| (CFG\d{3}) \| (\w+) \|", DOC, flags=re.MULTILINE))
    catalogue = load_catalogue()
    assert rows == {code: hazard.severity for code, hazard in catalogue.hazards.items()}

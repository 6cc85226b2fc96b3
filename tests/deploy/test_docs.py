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


def test_hazard_table_says_what_the_catalogue_says_each_code_fires_on_and_reads() -> None:
    """The catalogue's `fires_when` and `reads` are each hazard's documentation (its generated page); the README's
    table says the same, word for word."""
    rows = re.findall(r"^\| (CFG\d{3}) \| \w+ \| (.+?) \| (.+?) \|$", DOC, flags=re.MULTILINE)
    catalogue = load_catalogue()
    assert {code: (when, reads) for code, when, reads in rows} == {
        code: (hazard.fires_when, hazard.reads) for code, hazard in catalogue.hazards.items()
    }
    for hazard in catalogue.hazards.values():
        assert len(hazard.fires_when.split()) >= 3 and len(hazard.reads.split()) >= 3, hazard.code


def test_the_corpus_size_the_docs_give_is_the_corpus() -> None:
    from sg_config_corpus import CORPUS

    found = re.search(r"A differential test holds this to vLLM's real parser: (\d+) command lines", DOC)
    assert found is not None and int(found.group(1)) == len(CORPUS)

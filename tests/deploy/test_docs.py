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


def test_hazard_table_says_what_each_code_reads_from_the_served_source() -> None:
    rows = re.findall(r"^\| (CFG\d{3}) \| \w+ \| (.+?) \| (.+?) \|$", DOC, flags=re.MULTILINE)
    assert {code for code, _, _ in rows} == set(load_catalogue().hazards)
    for code, _, reads in rows:
        assert len(reads.split()) >= 3, code


def test_the_corpus_size_the_docs_give_is_the_corpus() -> None:
    from sg_config_corpus import CORPUS

    found = re.search(r"A differential test holds this to vLLM's real parser: (\d+) command lines", DOC)
    assert found is not None and int(found.group(1)) == len(CORPUS)

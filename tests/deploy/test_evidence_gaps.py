"""The gaps in a hazard's evidence (issue 26, items 4 and 9): while a hazard is judged, the served tree records each
module of the tree that its evidence led to and that could not be read, so that a hazard that found nothing there
is "not judged" naming it rather than clean. A small tree of its own: no release needed."""

from __future__ import annotations

import os
from pathlib import Path

from specguard.program.tree import SourceTree


def _tree(tmp_path: Path) -> SourceTree:
    root = tmp_path / "vllm"
    (root / "backends").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "backends" / "__init__.py").write_text("")
    (root / "registry.py").write_text("from vllm.backends.gone import Builder\nfrom vllm.backends.ok import Fine\n")
    (root / "backends" / "ok.py").write_text("class Fine:\n    pass\n")
    os.mkfifo(root / "backends" / "fifo.py")
    (root / "backends" / "broken.py").write_text("class Broken(:\n")
    return SourceTree.open(root)


def test_a_name_that_leads_to_a_missing_module_is_a_gap(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    with tree.tracking_gaps() as gaps:
        assert tree.resolve_class("vllm.registry", "Fine") is not None
        assert gaps == {}
        assert tree.resolve_class("vllm.registry", "Builder") is None
    assert gaps == {"vllm.backends.gone": "backends/gone.py is missing"}


def test_an_evidence_file_that_cannot_be_read_is_a_gap_naming_why(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    with tree.tracking_gaps() as gaps:
        assert tree.module_for_path("backends/fifo.py") is None  # never opened for reading: no hang
        assert tree.module_for_path("backends/broken.py") is None
    assert set(gaps) == {"vllm.backends.fifo", "vllm.backends.broken"}
    assert gaps["vllm.backends.fifo"].startswith("backends/fifo.py cannot be read (")
    assert gaps["vllm.backends.broken"].startswith("backends/broken.py cannot be read (syntax error: ")


def test_gaps_are_recorded_only_while_a_hazard_is_judged(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    assert tree.resolve_class("vllm.registry", "Builder") is None
    with tree.tracking_gaps() as gaps:
        pass
    assert gaps == {} and tree.gaps is None


def test_a_served_module_is_decoded_as_specguard_check_decodes_it(tmp_path: Path) -> None:
    """One reader below both tools (issue 27): a PEP 263 cookie is honoured, and bytes that are not the encoding
    the file declares make it a gap naming why, never a module of replacement characters that parses."""
    root = tmp_path / "vllm"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nNAME = '\xe9t\xe9'\n")
    (root / "mangled.py").write_bytes(b"NAME = '\xff\xfe'\n")
    tree = SourceTree.open(root)
    with tree.tracking_gaps() as gaps:
        latin = tree.module_for_path("latin.py")
        assert latin is not None and "NAME" in latin.assigns
        assert tree.module_for_path("mangled.py") is None
    assert gaps["vllm.mangled"].startswith("mangled.py cannot be read (cannot decode file as Python source")

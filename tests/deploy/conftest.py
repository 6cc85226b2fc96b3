"""Fixtures for the config pre-flight tests: the real vLLM sources and a way to run the CLI in-process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.composition import check_served_tree
from specguard.config_cli import config_main
from specguard.deploy.catalogue import Catalogue, load_catalogue
from specguard.deploy.facts import SourceFacts, open_source


@pytest.fixture(scope="session")
def source_dir(vllm_source: Callable[[str], Path]) -> Callable[[str], Path]:
    """The unpacked `vllm/` dir of a release: the same cached wheel sources as the analyzer tests."""
    return vllm_source


@pytest.fixture(scope="session")
def facts(source_dir: Callable[[str], Path]) -> Callable[[str], SourceFacts]:
    """SourceFacts per vLLM version, shared by the session (the same object the CLI would build)."""

    def get(version: str) -> SourceFacts:
        found = open_source(source_dir(version), check_served_tree)
        assert found is not None
        return found

    return get


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture
def run_config(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*argv: str) -> tuple[int, str, str]:
        rc = config_main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run

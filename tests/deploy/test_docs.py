"""docs/config.md stays true to the catalogue and to real runs (its examples table is checked in test_config_cli.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from specguard.deploy.catalogue import load_catalogue

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "config.md").read_text(encoding="utf-8")


def test_hazard_table_lists_every_code_with_its_severity() -> None:
    rows = dict(re.findall(r"^\| (CFG\d{3}) \| (\w+) \|", DOC, flags=re.MULTILINE))
    catalogue = load_catalogue()
    assert rows == {code: hazard.severity for code, hazard in catalogue.hazards.items()}


def test_hazard_table_says_what_the_catalogue_says_each_code_fires_on_and_reads() -> None:
    """The catalogue's `fires_when` and `reads` are each hazard's documentation (its generated page); the table
    of docs/config.md says the same, word for word."""
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


def _console(after: str) -> list[tuple[str, str, list[str]]]:
    """(command, comment, output lines) of each `$ ` line in the first console block after `after`."""
    block = DOC[DOC.index(after) :].split("```console\n", 1)[1].split("```", 1)[0]
    runs: list[tuple[str, str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command, _, comment = line[2:].partition("#")
            runs.append((command.strip(), comment.strip(), []))
        else:
            runs[-1][2].append(line)
    return runs


@pytest.mark.parametrize("with_source", [True, False])
def test_the_bad_input_examples_say_what_the_page_shows(
    with_source: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each example run as shown, its YAML written from its comment: with the test venv's vLLM installed, and with
    no vLLM source at all (the page says the first two hold either way; the blind gate is the no-source case)."""
    import specguard.deploy.facts as facts_module
    from specguard.config_cli import config_main

    if not with_source:
        monkeypatch.setattr(facts_module, "installed_vllm_dir", lambda: None)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    runs = _console("Bad input and a blind gate:")
    assert len(runs) == 3
    for command, comment, shown in runs:
        argv = shlex.split(command)[2:]
        if comment.startswith("model:"):
            Path(argv[0]).write_text("\n".join(comment.split(" / ")) + "\n")
        elif "no vLLM here" in comment and with_source:
            continue
        rc = config_main(argv)
        out, err = capsys.readouterr()
        assert (rc, out, err.splitlines()) == (2, "", shown), command


def test_the_doctor_example_is_what_doctor_prints_in_the_test_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's `specguard doctor` run, line for line, but for the two lines that name this machine's paths."""
    from specguard.config_cli import doctor_main

    ((command, _, shown),) = _console("## `specguard doctor`")
    assert command == "specguard doctor" and "runtime guard: VLLM_SPECGUARD unset: off" in shown
    monkeypatch.delenv("VLLM_SPECGUARD", raising=False)
    rc = doctor_main([])
    printed = capsys.readouterr().out.splitlines()

    def here(lines: list[str]) -> list[str]:
        return [line for line in lines if not line.startswith(("python ", "vllm source "))]

    assert rc == 0 and here(printed) == here(shown)
    assert len(printed) == len(shown)

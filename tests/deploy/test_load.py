"""Loading serving configs: vLLM's reading rules, one-line errors, and the reading without a served source.

Agreement with vLLM's own parser over a large corpus is test_parser_differential.py; these are the rules one by one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.deploy import cmdline
from specguard.deploy.facts import SourceFacts
from specguard.deploy.load import build, load, read_yaml, suggest
from specguard.deploy.model import ServingConfig
from specguard.errors import UserError

NEW = "0.33.0"


def _yaml(tmp_path: Path, text: str, name: str = "serve.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def new(facts: Callable[[str], SourceFacts]) -> SourceFacts:
    return facts(NEW)


def _read(argv: list[str], facts: SourceFacts | None) -> ServingConfig:
    return load(None, argv, facts).config


YAML = """
model: Qwen/Qwen3-8B
data_parallel_size: 2
tensor-parallel-size: 4
decode-context-parallel-size: 2
attention-backend: flashinfer_mla
enforce-eager: true
speculative-config:
  method: dflash
  model: z-lab/draft
  num-speculative-tokens: 15
compilation-config: '{"cudagraph_mode": "piecewise"}'
max-model-len: 32768
"""

ARGV = [
    "Qwen/Qwen3-8B",
    "-dp",
    "2",
    "--tensor-parallel-size=4",
    "--decode-context-parallel-size",
    "2",
    "--attention-backend",
    "FLASHINFER_MLA",
    "--enforce-eager",
    "--speculative-config",
    '{"method": "dflash", "model": "z-lab/draft", "num_speculative_tokens": 15}',
    "--compilation-config.cudagraph_mode",
    "PIECEWISE",
    "--max-model-len",
    "32k",
]


def test_yaml_and_argv_give_the_same_config(tmp_path: Path, new: SourceFacts) -> None:
    from_yaml = load(str(_yaml(tmp_path, YAML)), None, new).config
    from_argv = _read(ARGV, new)
    fields = set(ServingConfig.model_fields)
    assert from_yaml.model_dump(include=fields) == from_argv.model_dump(include=fields)
    assert (from_yaml.data_parallel_size, from_yaml.tensor_parallel_size, from_yaml.method) == (2, 4, "dflash")
    assert from_yaml.attention_backend == "FLASHINFER_MLA" and from_yaml.cudagraph_mode == "PIECEWISE"
    assert from_yaml.speculative_config is not None and from_yaml.speculative_config.num_speculative_tokens == 15


def test_the_file_is_read_as_config_before_the_arguments(tmp_path: Path, new: SourceFacts) -> None:
    path = _yaml(tmp_path, "model: m\ndata-parallel-size: 4\ntensor-parallel-size: 2\n")
    cfg = load(str(path), ["--data-parallel-size", "2"], new).config
    assert (cfg.data_parallel_size, cfg.tensor_parallel_size) == (2, 2)


def test_dotted_keys_replace_the_json_value(new: SourceFacts) -> None:
    cfg = _read(
        ["m", "-sc", '{"method": "dflash", "model": "d"}', "--speculative-config.num_speculative_tokens", "8"], new
    )
    assert cfg.speculative_config is not None
    assert (cfg.method, cfg.speculative_config.num_speculative_tokens) == (None, 8)


def test_abbreviations_and_underscores(new: SourceFacts) -> None:
    cfg = _read(["m", "--tensor-parallel", "4", "--decode_context", "2", "--enforce"], new)
    assert (cfg.tensor_parallel_size, cfg.decode_context_parallel_size, cfg.enforce_eager) == (4, 2, True)


def test_several_values_for_one_option(new: SourceFacts) -> None:
    loaded = load(None, ["m", "--served-model-name", "a", "b", "-dp", "2"], new)
    assert loaded.reading.values["served_model_name"] == ["a", "b"]
    assert loaded.config.data_parallel_size == 2


def test_attention_config_backend_is_the_attention_backend(new: SourceFacts) -> None:
    assert _read(["m", "--attention-config.backend", "triton_mla"], new).attention_backend == "TRITON_MLA"
    assert _read(["m", "-ac", '{"backend": "auto"}'], new).attention_backend is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["m", "-cc", '{"cudagraph_mode": "auto"}'], "'AUTO' is not a member of CUDAGraphMode"),
        (["m", "-cc", '{"cudagraph_mode": " FULL"}'], "' FULL' is not a member of CUDAGraphMode"),
        (["m", "-cc", '{"cudagraph-mode": "FULL"}'], "vLLM's keys use underscores: 'cudagraph_mode'"),
        (["m", "-cc", '{"cudagraph_mod": "FULL"}'], "did you mean 'cudagraph_mode'?"),
        (["m", "--attention-config.backend", "NOPE"], "AttentionConfig.backend"),
        (["m", "--data-parallel-size", "two"], "argument --data-parallel-size/-dp: expected an integer, got 'two'"),
        (
            ["m", "--data-paralel-size", "2"],
            "unknown option '--data-paralel-size'; did you mean '--data-parallel-size'?",
        ),
        (["m", "--data-parallel", "2"], "ambiguous option: --data-parallel could match"),
        (["m", "n"], "unrecognized arguments: n"),
        (["m", "--spec-method", "dflash", "-sc", '{"method": "eagle"}'], "--spec-method and --speculative-config"),
        (["m", "--attention-backend", "A", "--attention-config.backend", "TRITON_MLA"], "mutually exclusive"),
        (["--served-model-name", "a"], "needs the model as the first argument"),
        (["m", "--config"], "--config needs a file"),
    ],
)
def test_what_vllm_refuses_is_one_line(argv: list[str], expected: str, new: SourceFacts) -> None:
    with pytest.raises(UserError) as info:
        _read(argv, new)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_a_valid_cudagraph_mode_by_value(new: SourceFacts) -> None:
    assert _read(["m", "-cc", '{"cudagraph_mode": 2}'], new).cudagraph_mode == "FULL"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('model: m\nenforce-eager: "true"\n', None),  # the string becomes the positional model: no error here
        ("enforce-eager: true\n", "no model"),
        ("- model\n- m\n", "expects a mapping of vllm serve options, got a YAML list"),
        ("", "got an empty file"),
        ("model: m\ndata-parallel-size: 2.5\n", "expected an integer, got '2.5'"),
    ],
)
def test_yaml_values_become_arguments_as_in_vllm(
    tmp_path: Path, text: str, expected: str | None, new: SourceFacts
) -> None:
    path = _yaml(tmp_path, text)
    if expected is None:
        assert load(str(path), None, new).config.model == "true"
        with pytest.raises(UserError, match="unrecognized arguments: true"):
            load(str(path), ["m"], new)
        return
    with pytest.raises(UserError) as info:
        load(str(path), None, new)
    assert expected in str(info.value)


def test_the_same_option_twice_in_yaml_keeps_the_last(tmp_path: Path, new: SourceFacts) -> None:
    path = _yaml(tmp_path, "model: m\ndata-parallel-size: 2\ndata_parallel_size: 1\n")
    assert load(str(path), None, new).config.data_parallel_size == 1


def test_a_config_file_must_be_yaml(tmp_path: Path, new: SourceFacts) -> None:
    path = _yaml(tmp_path, "model: m\n", "serve.json")
    with pytest.raises(UserError, match=r"vLLM reads only \.yaml/\.yml config files"):
        load(str(path), None, new)


# -- the rules themselves -------------------------------------------------------------------------------------


def test_preprocess_dotted_keys_and_underscores() -> None:
    out = cmdline.preprocess(["m", "--speculative_config.num_speculative_tokens", "3", "-sc.method=dflash", "-tp", "2"])
    assert out == [
        "m",
        "-tp",
        "2",
        "--speculative-config",
        '{"num_speculative_tokens": 3}',
        "-sc",
        '{"method": "dflash"}',
    ]
    assert cmdline.preprocess(["--x.y+", "a,b", "--x.y+", "c"]) == ["--x", '{"y": ["a", "b", "c"]}']
    assert cmdline.preprocess(["-O3", "-O", "2"]) == ["--optimization-level", "3", "--optimization-level", "2"]
    assert cmdline.preprocess(["--a.b=org/model.v2"]) == ["--a", '{"b": "org/model.v2"}']


@pytest.mark.parametrize(("text", "value"), [("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("7", 7), ("2M", 2**21)])
def test_human_readable_integers(text: str, value: int) -> None:
    assert cmdline.human_readable_int(text) == value


def test_yaml_to_args() -> None:
    strings = {"--no-enforce-eager"}
    data = {
        "enforce-eager": False,
        "enforce_eager": False,
        "trust-remote-code": True,
        "served-model-name": ["a", "b"],
        "speculative-config": {"method": "dflash"},
        "max-model-len": 1024,
        "empty": [],
    }
    assert cmdline.yaml_to_args("f.yaml", data, strings) == [
        "--no-enforce-eager",
        "--trust-remote-code",
        "--served-model-name",
        "a",
        "b",
        "--speculative-config",
        json.dumps({"method": "dflash"}),
        "--max-model-len",
        "1024",
    ]


# -- without a served source ----------------------------------------------------------------------------------


def test_without_a_source_the_modelled_options_are_still_read_and_checked(tmp_path: Path) -> None:
    loaded = load(None, ["m", "-dp", "2", "--port", "8000", "--speculative-config.method", "dflash"], None)
    assert loaded.config.data_parallel_size == 2 and loaded.config.method == "dflash"
    assert any("--port" in note and "pass --vllm-source" in note for note in loaded.notes)
    with pytest.raises(UserError, match="expected an integer, got 'two'"):
        load(None, ["m", "-dp", "two"], None)
    path = _yaml(tmp_path, "model: m\ndata-parallel-size: 0\n")
    with pytest.raises(UserError, match="data-parallel-size: expected an integer >= 1, got 0"):
        load(str(path), None, None)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"data_parallel_size": True}, "data-parallel-size: expected an integer (not a boolean), got True"),
        ({"speculative_config": {"num_speculative_tokens": "many"}}, "speculative-config.num_speculative_tokens"),
        ({"speculative_config": ["dflash"]}, "speculative-config: expected a mapping, got a list"),
    ],
)
def test_model_types_name_the_key_path_and_the_expectation(data: dict, expected: str) -> None:
    with pytest.raises(UserError) as info:
        build(data, "x")
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_suggestions_are_close_spellings_only() -> None:
    flags = ["--data-parallel-size", "--data-parallel-size-local", "--pipeline-parallel-size", "--block-size"]
    assert suggest("--block-sise", flags) == "--block-size"
    assert suggest("--data-paralel-size", flags) == "--data-parallel-size"
    # A different option that merely looks alike (two edits on a short name) is not offered.
    assert suggest("--bloc-sz", flags) is None


def test_broken_yaml(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"invalid YAML \(line \d+, column \d+\)"):
        read_yaml(_yaml(tmp_path, "data-parallel-size: [2\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_yaml(tmp_path / "nope.yaml")


def test_json_string_and_mapping_are_the_same(tmp_path: Path, new: SourceFacts) -> None:
    spec = {"method": "dspark", "num_speculative_tokens": 7}
    as_string = load(str(_yaml(tmp_path, f"model: m\nspeculative-config: '{json.dumps(spec)}'\n")), None, new)
    as_mapping = load(str(_yaml(tmp_path, f"model: m\nspeculative-config: {json.dumps(spec)}\n", "b.yaml")), None, new)
    assert as_string.config.model_dump() == as_mapping.config.model_dump()


def test_yaml_without_pyyaml_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` raise ImportError
    with pytest.raises(UserError, match=r"needs PyYAML: pip install pyyaml \(what specguard's `config` extra adds\)"):
        read_yaml(_yaml(tmp_path, "data-parallel-size: 2\n"))


def test_a_source_whose_parser_cannot_be_read_falls_back_with_a_note(tmp_path: Path) -> None:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    facts = SourceFacts.open(pkg)
    loaded = load(None, ["m", "-dp", "2", "--port", "8000"], facts)
    assert loaded.config.data_parallel_size == 2
    assert any("neither `make_arg_parser` nor `EngineArgs.add_cli_args` was found" in n for n in loaded.notes)
    assert any("--port" in n for n in loaded.notes)


def test_a_crash_reading_the_parser_costs_the_definitions_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specguard.deploy.arguments as arguments

    def boom(tree: object) -> None:
        raise RecursionError("unusual parser code")

    monkeypatch.setattr(arguments, "read_serve_options", boom)
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    loaded = load(None, ["m", "-tp", "2"], SourceFacts.open(pkg))
    assert loaded.config.tensor_parallel_size == 2
    assert any("RecursionError: unusual parser code" in n for n in loaded.notes)

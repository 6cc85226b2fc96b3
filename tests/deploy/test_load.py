"""Loading serving configs: YAML and argv give the same model; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.deploy.load import build, parse_argv, read_yaml, suggest
from specguard.deploy.model import ServingConfig, modelled_keys
from specguard.errors import UserError


def _yaml(tmp_path: Path, text: str, name: str = "serve.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _from_yaml(tmp_path: Path, text: str) -> ServingConfig:
    path = _yaml(tmp_path, text)
    return build(read_yaml(path), str(path))


def test_yaml_reads_modelled_options_with_dashes_or_underscores(tmp_path: Path) -> None:
    cfg = _from_yaml(
        tmp_path,
        """
model: Qwen/Qwen3-8B
data_parallel_size: 2
tensor-parallel-size: 4
decode-context-parallel-size: 2
cp_kv_cache_interleave_size: 1
attention-backend: flashinfer_mla
enforce-eager: true
speculative-config:
  method: dflash
  model: z-lab/draft
  num-speculative-tokens: 15
compilation-config: '{"cudagraph_mode": "piecewise"}'
max-model-len: 32768
""",
    )
    assert cfg.data_parallel_size == 2
    assert cfg.tensor_parallel_size == 4
    assert cfg.decode_context_parallel_size == 2
    assert cfg.cp_kv_cache_interleave_size == 1
    assert cfg.attention_backend == "FLASHINFER_MLA"
    assert cfg.enforce_eager is True
    assert cfg.method == "dflash"
    assert cfg.speculative_config is not None and cfg.speculative_config.num_speculative_tokens == 15
    assert cfg.cudagraph_mode == "PIECEWISE"


def test_unmodelled_vllm_options_are_accepted(tmp_path: Path) -> None:
    cfg = _from_yaml(tmp_path, "max-num-seqs: 256\ngpu-memory-utilization: 0.9\ndata-parallel-size-local: 1\n")
    assert cfg.data_parallel_size == 1


def test_auto_attention_backend_means_unset(tmp_path: Path) -> None:
    assert _from_yaml(tmp_path, "attention-backend: auto\n").attention_backend is None


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
    "32768",
]
YAML = """
model: Qwen/Qwen3-8B
data-parallel-size: 2
tensor-parallel-size: 4
decode-context-parallel-size: 2
attention-backend: FLASHINFER_MLA
enforce-eager: true
speculative-config:
  method: dflash
  model: z-lab/draft
  num_speculative_tokens: 15
compilation-config:
  cudagraph_mode: PIECEWISE
max-model-len: 32768
"""


def test_argv_and_yaml_give_the_same_config(tmp_path: Path) -> None:
    from_argv = build(parse_argv(ARGV), "argv")
    from_yaml = _from_yaml(tmp_path, YAML)
    # Modelled options compare equal; unmodelled ones stay as given (argv strings), as vLLM would parse them.
    fields = set(ServingConfig.model_fields)
    assert from_argv.model_dump(include=fields) == from_yaml.model_dump(include=fields)
    assert from_argv.data_parallel_size == 2 and from_argv.enforce_eager is True


def test_argv_dotted_keys_merge_into_a_json_option() -> None:
    raw = parse_argv(
        ["--speculative-config", '{"method": "dspark"}', "--speculative-config.num_speculative_tokens", "7"]
    )
    cfg = build(raw, "argv")
    assert cfg.speculative_config is not None
    assert (cfg.method, cfg.speculative_config.num_speculative_tokens) == ("dspark", 7)


def test_argv_dotted_keys_under_a_short_option() -> None:
    cfg = build(parse_argv(["-sc.method", "dflash", "-cc.cudagraph_mode=FULL"]), "argv")
    assert (cfg.method, cfg.cudagraph_mode) == ("dflash", "FULL")


def test_argv_no_flag_and_unmodelled_switches() -> None:
    cfg = build(parse_argv(["m", "--no-enforce-eager", "--trust-remote-code", "-tp", "2"]), "argv")
    assert cfg.enforce_eager is False
    assert cfg.tensor_parallel_size == 2


def test_argv_config_file_is_overridden_by_arguments(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "data-parallel-size: 4\ntensor-parallel-size: 2\n")
    cfg = build(parse_argv(["--config", str(path), "--data-parallel-size", "2"]), "argv")
    assert (cfg.data_parallel_size, cfg.tensor_parallel_size) == (2, 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("data-paralel-size: 2\n", "unknown option 'data-paralel-size'; did you mean 'data-parallel-size'?"),
        ("tensor_paralel_size: 2\n", "did you mean 'tensor-parallel-size'?"),
        ("decode-context-paralell-size: 2\n", "did you mean 'decode-context-parallel-size'?"),
        ("enforce-eagre: true\n", "did you mean 'enforce-eager'?"),
        (
            "speculative-config:\n  method: dflash\n  num_speculative_token: 3\n",
            "unknown key 'speculative-config.num_speculative_token'; "
            "did you mean 'speculative-config.num_speculative_tokens'?",
        ),
        (
            "compilation-config:\n  cudagraph_mod: FULL\n",
            "did you mean 'compilation-config.cudagraph_mode'?",
        ),
    ],
)
def test_misspelt_keys_are_errors_with_a_suggestion(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(UserError) as info:
        _from_yaml(tmp_path, text)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("data-parallel-size: two\n", "data-parallel-size: expected an integer, got 'two'"),
        ("data-parallel-size: 2.5\n", "data-parallel-size: expected an integer, got 2.5"),
        ("data-parallel-size: 0\n", "data-parallel-size: expected an integer >= 1, got 0"),
        ("data-parallel-size: true\n", "data-parallel-size: expected an integer (not a boolean), got True"),
        ("enforce-eager: maybe\n", "enforce-eager: expected true or false, got 'maybe'"),
        (
            "speculative-config:\n  num_speculative_tokens: many\n",
            "speculative-config.num_speculative_tokens: expected an integer, got 'many'",
        ),
        ("speculative-config: [dflash]\n", "speculative-config: expected a mapping, got a list"),
        (
            "speculative-config: '{method: dflash'\n",
            "speculative-config: expected a mapping or a JSON object string",
        ),
        (
            "compilation-config:\n  cudagraph_mode: 2\n",
            "compilation-config.cudagraph_mode: expected a string, got 2",
        ),
    ],
)
def test_wrong_types_name_the_key_path_and_the_expectation(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(UserError) as info:
        _from_yaml(tmp_path, text)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_real_vllm_options_near_a_modelled_key_are_not_misspellings() -> None:
    # difflib alone would call these misspellings of data-parallel-size.
    for key in (
        "data-parallel-size-local",
        "data-parallel-rank",
        "data-parallel-backend",
        "pipeline-parallel-size",
    ):
        assert suggest(key, modelled_keys()) is None


def test_known_options_from_the_source_are_never_reported(tmp_path: Path) -> None:
    # `block-sizes` is one edit from `block-size`; a served source that defines it makes it a real option.
    with pytest.raises(UserError):
        build({"block-sizes": 1}, "x")
    cfg = build({"block-sizes": 1}, "x", known=lambda: {"block-sizes"})
    assert cfg.block_size is None


def test_same_option_twice_is_an_error() -> None:
    with pytest.raises(UserError, match="given twice"):
        build({"dp": 2, "data_parallel_size": 2}, "x")


def test_broken_yaml(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "data-parallel-size: [2\n")
    with pytest.raises(UserError, match=r"invalid YAML \(line \d+, column \d+\)"):
        read_yaml(path)


def test_non_mapping_yaml(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "- data-parallel-size\n- 2\n")
    with pytest.raises(UserError, match="expected a mapping of vllm serve options, got a YAML list"):
        read_yaml(path)


def test_empty_yaml_is_the_default_config(tmp_path: Path) -> None:
    assert build(read_yaml(_yaml(tmp_path, "")), "x").data_parallel_size == 1


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_yaml(tmp_path / "nope.yaml")


def test_json_string_and_mapping_are_the_same(tmp_path: Path) -> None:
    spec = {"method": "dspark", "num_speculative_tokens": 7}
    as_string = build({"speculative-config": json.dumps(spec)}, "x")
    as_mapping = build({"speculative-config": spec}, "x")
    assert as_string.model_dump() == as_mapping.model_dump()


def test_yaml_without_pyyaml_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` raise ImportError
    with pytest.raises(UserError, match=r"needs PyYAML: pip install 'specguard\[config\]'"):
        read_yaml(_yaml(tmp_path, "data-parallel-size: 2\n"))

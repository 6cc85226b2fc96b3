"""YAML and JSON bombs in a serving config (issue 26 item 7): aliases that expand a few hundred bytes into billions
of values, anchors that refer to themselves, nesting deeper than the readers' stacks, and values YAML's own
constructors refuse, in the YAML file and in the JSON values of the command line (`--speculative-config '{...}'`,
dotted keys). Each is one line and exit 2, refused before the data is built.

Before: a 446-byte YAML of nested aliases filled memory (a MemoryError traceback, exit 1), a self-referencing
anchor was `ValueError: Circular reference detected` (exit 1: CI reads "hazards found"), deep nesting a
RecursionError. Every run is a child under RLIMIT_AS (512 MiB) and RLIMIT_CPU; nothing is timed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bounded import limits

MEMORY = 512 << 20  # a normal `specguard config` run against 0.33.0 peaks near 170 MB
CPU_SECONDS = 30
HANG_GUARD = 300


def _config(cwd: Path, source: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "config", "--vllm-source", str(source), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )


def _laughs(indent: str, levels: int = 9) -> str:
    """Anchors each listing the one before nine times: 9**levels values from a few hundred bytes."""
    lines = [f"{indent}l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{indent}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _merges(indent: str, levels: int = 9) -> str:
    """The same growth through merge keys (`<<: [*m0, *m0, ...]`), which YAML expands when it builds a mapping."""
    lines = [f"{indent}m0: &m0 {{k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8}}"]
    lines += [f"{indent}m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _block_nesting(depth: int) -> str:
    """`x:` holding a mapping holding a mapping ..., one space of indentation more each level."""
    return "x:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(depth)) + " " * (depth + 1) + "v\n"


SPEC = "speculative-config:\n  method: ngram\n  num_speculative_tokens: 3\n"
EXPANSION = "more than 100,000 values once aliases are expanded"
RECURSIVE = "refers to itself"
NESTED = "nested too deeply"
# name -> (YAML text, what the one line says)
YAML_BOMBS = {
    # The two: at the top level, and inside speculative-config (read as one JSON value).
    "aliases-at-top-level": ("model: m\n" + _laughs(""), EXPANSION),
    "aliases-in-speculative-config": ("model: m\n" + SPEC + "  lol:\n" + _laughs("    "), EXPANSION),
    "aliases-in-a-list-value": ("model: m\n" + _laughs("") + "allowed-origins: [*l8]\n", EXPANSION),
    # Few values, each a long string: measured by their text.
    "long-string-aliased": (
        "model: m\n" + SPEC + '  s: &s "' + "x" * (4 << 20) + '"\n  l: [' + ", ".join(["*s"] * 1000) + "]\n",
        "MiB of text once aliases are expanded",
    ),
    "merge-keys": ("model: m\n" + SPEC + "  lol:\n" + _merges("    "), EXPANSION),
    "self-referencing-mapping": ("model: m\nspeculative-config: &s\n  method: ngram\n  self: *s\n", RECURSIVE),
    "self-referencing-list": ("model: m\n" + SPEC + "  loop: &l [1, *l]\n", RECURSIVE),
    "self-referencing-merge": ("model: m\nspeculative-config: &s\n  method: ngram\n  <<: *s\n", RECURSIVE),
    "anchor-reached-through-a-child": ("model: m\nx: &a\n  y:\n    z: [*a]\n", RECURSIVE),
    "deep-flow-nesting": ("model: m\nx: " + "[" * 100_000 + "]" * 100_000 + "\n", NESTED),
    "deep-flow-nesting-in-speculative-config": (
        'model: m\nspeculative-config: {"method": "ngram", "a": ' + "[" * 600 + "]" * 600 + "}\n",
        NESTED,
    ),
    "deep-block-nesting": ("model: m\n" + _block_nesting(2_000), NESTED),
    # A plain key holds at most 1024 characters: a long one is written as an explicit `? key`.
    "dotted-key-in-yaml": ("model: m\n? speculative-config." + ".".join(["a"] * 30_000) + "\n: 1\n", NESTED),
    "integer-over-python-limit": ("model: m\ntensor-parallel-size: " + "1" * 6_000 + "\n", "invalid YAML"),
    "impossible-date": ("model: m\nserved-model-name: 2001-13-45\n", "invalid YAML"),
}


@pytest.mark.parametrize("bomb", sorted(YAML_BOMBS))
def test_a_yaml_bomb_is_one_line_and_exit_2(bomb: str, tmp_path: Path, source_dir: Callable[[str], Path]) -> None:
    text, says = YAML_BOMBS[bomb]
    (tmp_path / "serve.yaml").write_text(text)
    proc = _config(tmp_path, source_dir("0.33.0"), "serve.yaml")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("specguard: error: serve.yaml: ") and says in line, line
    assert proc.returncode == 2 and proc.stdout == ""


def _deep_json(depth: int) -> str:
    return '{"method": "ngram", "a": ' + "[" * depth + "]" * depth + "}"


# name -> vllm serve arguments after the model
JSON_BOMBS = {
    "deep-json-value": ["--speculative-config", _deep_json(40_000)],
    "json-value-deep-for-its-readers": ["--speculative-config", _deep_json(600)],
    "deep-dotted-key": ["--speculative-config." + ".".join(["a"] * 30_000), "1"],
    "deep-json-in-a-dotted-key": ["--speculative-config.method", "[" * 40_000 + "]" * 40_000],
    "deep-json-in-a-dict-option": ["--hf-overrides", '{"a": ' + "[" * 40_000 + "]" * 40_000 + "}"],
}


@pytest.mark.parametrize("bomb", sorted(JSON_BOMBS))
def test_a_json_bomb_on_the_command_line_is_one_line_and_exit_2(
    bomb: str, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    proc = _config(tmp_path, source_dir("0.33.0"), "--", "m", *JSON_BOMBS[bomb])
    (line,) = proc.stderr.splitlines()
    assert line.startswith("specguard: error: vllm serve arguments: ") and NESTED in line, line
    assert proc.returncode == 2 and proc.stdout == ""


HUGE = "1" + "0" * 100_000  # past Python's int-from-string limit (4,300 digits): int() and json.loads refuse it
TOO_LONG = "a number too long to read"
# name -> vllm serve arguments after the model; each a number no conversion of Python can read
HUGE_NUMBERS = {
    "in-a-json-value": [
        "--speculative-config",
        '{"method": "dflash", "model": "d", "num_speculative_tokens": ' + HUGE + "}",
    ],
    "in-a-dotted-value": ["--speculative-config.method", "dflash", "--speculative-config.num_speculative_tokens", HUGE],
    "in-an-int-option": ["-dp", HUGE],
    "in-a-human-readable-int": ["--max-model-len", HUGE + "k"],
    "in-a-human-readable-float": ["--max-model-len", HUGE + ".5k"],
}


@pytest.mark.parametrize("where", sorted(HUGE_NUMBERS))
def test_a_number_too_long_to_read_is_one_line_and_exit_2(
    where: str, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """Before: json.loads raised a bare ValueError (not a JSONDecodeError) and the run ended in a traceback."""
    proc = _config(tmp_path, source_dir("0.33.0"), "--", "m", *HUGE_NUMBERS[where])
    (line,) = proc.stderr.splitlines()
    assert line.startswith("specguard: error: vllm serve arguments: ") and TOO_LONG in line, line
    assert len(line) < 400 and proc.returncode == 2 and proc.stdout == ""


def test_anchors_and_merge_keys_within_the_limits_read_as_before(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """A config that shares its values through anchors reads as the same config written out."""
    shared = (
        "model: m\ndata-parallel-size: &two 2\ntensor-parallel-size: *two\n"
        "speculative-config:\n  <<: &ngram {method: ngram, num_speculative_tokens: 3}\n  prompt_lookup_max: 4\n"
    )
    written = (
        "model: m\ndata-parallel-size: 2\ntensor-parallel-size: 2\n"
        "speculative-config:\n  method: ngram\n  num_speculative_tokens: 3\n  prompt_lookup_max: 4\n"
    )
    (tmp_path / "shared.yaml").write_text(shared)
    (tmp_path / "written.yaml").write_text(written)
    a = _config(tmp_path, source_dir("0.33.0"), "--format", "json", "shared.yaml")
    b = _config(tmp_path, source_dir("0.33.0"), "--format", "json", "written.yaml")
    assert "Traceback" not in a.stderr
    assert (a.returncode, a.stdout) == (b.returncode, b.stdout)

"""CLASS 7: YAML bombs in a serving config (`specguard config FILE.yaml`) and TOML bombs in settings
(`pyproject.toml`, `--config FILE`) and rule packs (`--rule-pack FILE`). Expected: one error line, exit 2
(never 1, "hazards/findings found"), bounded memory/CPU, no traceback, nothing executed."""

import os
from pathlib import Path

from sg1harness import (
    SG101_BAD,
    assert_one_line_error,
    run_cli,
    write,
)

# ---------------------------------------------------------------------------------------------- YAML


def _laughs(levels=9, width=9, prefix="l"):
    """Anchors l0..l{levels-1} inside one flow mapping, each level `width` aliases of the one before."""
    parts = [f'"{prefix}0": &{prefix}0 [' + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        parts.append(f'"{prefix}{i}": &{prefix}{i} [' + ", ".join([f"*{prefix}{i - 1}"] * width) + "]")
    return parts


def _config(tmp_path, home, text: str, name="serve.yaml", extra=(), vllm_src=None):
    cfg = write(tmp_path / name, text)
    args = ["config", str(cfg), *extra]
    if vllm_src is not None:
        args += ["--vllm-source", str(vllm_src)]
    return run_cli(args, tmp_path, home, timeout=150)


def test_yaml_billion_laughs_inside_speculative_config(tmp_path, home):
    """CLASS 7: a serving YAML whose speculative-config mapping (with valid method/model keys) holds nine levels of nested aliases, nine wide (9**9 strings once expanded), with data-parallel-size 2. EXPECT: exit 2 with one error line, no RLIMIT hit, no traceback."""
    spec = (
        "{" + ", ".join(['"method": "dflash"', '"model": "z-lab/d"', '"num_speculative_tokens": 3', *_laughs()]) + "}"
    )
    text = f"model: Qwen/Qwen3-8B\ndata-parallel-size: 2\nspeculative-config: {spec}\n"
    assert_one_line_error(_config(tmp_path, home, text))


def test_yaml_billion_laughs_in_list_option(tmp_path, home, vllm_src):
    """CLASS 7: the alias bomb expands into a list-valued option (served-model-name, nargs '+'), so each leaf would become one argv word; judged against the real vLLM 0.33.0 source. EXPECT: exit 2 with one error line, no RLIMIT hit, no traceback."""
    inner = "{" + ", ".join(_laughs(prefix="s")) + "}"
    text = (
        "model: Qwen/Qwen3-8B\n"
        f'compilation-config: {{"cudagraph_mode": "FULL", "bomb": {inner}}}\n'
        "served-model-name: [*s8, *s8, *s8, *s8, *s8, *s8, *s8, *s8, *s8]\n"
    )
    assert_one_line_error(_config(tmp_path, home, text, vllm_src=vllm_src))


def test_yaml_self_referencing_anchor(tmp_path, home):
    """CLASS 7: speculative-config: &r {method: dflash, model: m, self: *r} (a mapping that contains itself) and served-model-name: &s [a, *s] (a list that contains itself). EXPECT: exit 2 with one error line, no RecursionError traceback, bounded."""
    text = (
        "model: m\n"
        "data-parallel-size: 2\n"
        "speculative-config: &r {method: dflash, model: m, num_speculative_tokens: 3, self: *r}\n"
        "served-model-name: &s [a, *s]\n"
    )
    assert_one_line_error(_config(tmp_path, home, text))


def test_yaml_very_deep_flow_nesting(tmp_path, home):
    """CLASS 7: speculative-config nested 200k flow sequences deep ([[[[...]]]]), a recursion bomb for YAML composers (and for libyaml's C stack). EXPECT: exit 2 with one error line, no crash/signal, no traceback."""
    depth = 200_000
    text = "model: m\nspeculative-config: " + "[" * depth + "1" + "]" * depth + "\n"
    assert_one_line_error(_config(tmp_path, home, text))


def test_yaml_very_deep_block_nesting(tmp_path, home):
    """CLASS 7: speculative-config as a block mapping nested 3000 levels deep by indentation (method: dflash at the bottom). EXPECT: exit 2 with one error line, no RecursionError traceback, bounded."""
    lines = ["model: m", "speculative-config:"]
    for i in range(1, 3000):
        lines.append(" " * i + "a:")
    lines.append(" " * 3000 + "method: dflash")
    assert_one_line_error(_config(tmp_path, home, "\n".join(lines) + "\n"))


def test_yaml_huge_flow_sequence(tmp_path, home):
    """CLASS 7: a 64 MB serving YAML: served-model-name is a flow sequence of ~21M items. EXPECT: exit 2 with one error line (a size cap), no RLIMIT (CPU 60 s, 2 GiB) hit, no traceback."""
    n = (64 * 1024 * 1024) // 3
    text = "model: m\nserved-model-name: [" + "m, " * n + "m]\n"
    assert_one_line_error(_config(tmp_path, home, text))


def test_yaml_python_tags_never_run(tmp_path, home):
    """CLASS 7: a serving YAML using PyYAML's python tags: model: !!python/object/apply:os.system ["touch MARK"] and speculative-config: !!python/object/new:subprocess.Popen [[touch, MARK2]]. EXPECT: exit 2 with one error line, and neither MARK file is created (nothing executed)."""
    mark = tmp_path / "MARK"
    mark2 = tmp_path / "MARK2"
    text = (
        f'model: !!python/object/apply:os.system ["touch {mark}"]\n'
        f'speculative-config: !!python/object/new:subprocess.Popen [["touch", "{mark2}"]]\n'
    )
    res = _config(tmp_path, home, text)
    assert not mark.exists() and not mark2.exists(), f"the YAML's python tags were executed\n{res.describe()}"
    assert_one_line_error(res)


def test_yaml_config_is_dev_zero_or_fifo(tmp_path, home):
    """CLASS 7: the serving config file is not a regular file: serve.yaml -> /dev/zero (an endless read), then serve.yaml is a FIFO nobody writes to. EXPECT: each run exits 2 with one error line, no hang, no RLIMIT hit."""
    link = tmp_path / "zero" / "serve.yaml"
    link.parent.mkdir()
    os.symlink("/dev/zero", link)
    res = run_cli(["config", str(link)], tmp_path, home, timeout=90)
    assert_one_line_error(res)
    fifo = tmp_path / "fifo" / "serve.yaml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    res = run_cli(["config", str(fifo)], tmp_path, home, timeout=90)
    assert_one_line_error(res)


def test_cli_speculative_config_json_nested_deep(tmp_path, home):
    """CLASS 7: `specguard config -- m -dp 2 --speculative-config '{"a":{"a":...}}'` with the JSON value nested 15k objects deep (json recursion; ~105 KB, under the kernel's 128 KB per-argument limit). EXPECT: exit 2 with one error line, no RecursionError traceback."""
    depth = 15_000
    value = '{"method": "dflash", "model": "d", "x": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
    res = run_cli(["config", "--", "m", "-dp", "2", "--speculative-config", value], tmp_path, home, timeout=150)
    assert_one_line_error(res)


# ---------------------------------------------------------------------------------------------- TOML


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "a.py", SG101_BAD)
    return proj


def test_pyproject_dotted_table_5000_deep(tmp_path, home):
    """CLASS 7: pyproject.toml with a table header [tool.specguard.a.a.a...] 5000 keys deep (and a value in it). EXPECT: exit 2 with one error line, bounded, no traceback; never exit 1."""
    proj = _project(tmp_path)
    write(proj / "pyproject.toml", "[tool.specguard." + ".".join(["a"] * 5000) + "]\nx = 1\n")
    assert_one_line_error(run_cli(["check", "pkg", "-n"], proj, home, timeout=150))


def test_pyproject_deep_inline_tables(tmp_path, home):
    """CLASS 7: pyproject.toml [tool.specguard] per-file-ignores = {a = {a = {... 50k deep ...}}} (recursive-descent TOML parsers overflow). EXPECT: exit 2 with one error line, no RecursionError traceback; never exit 1."""
    proj = _project(tmp_path)
    depth = 50_000
    write(proj / "pyproject.toml", "[tool.specguard]\nper-file-ignores = " + "{a = " * depth + "1" + "}" * depth + "\n")
    assert_one_line_error(run_cli(["check", "pkg", "-n"], proj, home, timeout=150))


def test_pyproject_deep_arrays(tmp_path, home):
    """CLASS 7: pyproject.toml [tool.specguard] select = [[[[... 100k deep ...]]]]. EXPECT: exit 2 with one error line, no RecursionError traceback; never exit 1."""
    proj = _project(tmp_path)
    depth = 100_000
    write(proj / "pyproject.toml", "[tool.specguard]\nselect = " + "[" * depth + '"SG101"' + "]" * depth + "\n")
    assert_one_line_error(run_cli(["check", "pkg", "-n"], proj, home, timeout=150))


def test_rule_pack_deep_inline_tables(tmp_path, home):
    """CLASS 7: --rule-pack FILE whose [speculators] bases = {a = {a = ... 50k deep}}. EXPECT: exit 2 with one error line naming the pack, no traceback; never exit 1."""
    proj = _project(tmp_path)
    depth = 50_000
    pack = write(tmp_path / "fork.toml", "[speculators]\nbases = " + "{a = " * depth + "1" + "}" * depth + "\n")
    res = run_cli(["check", "pkg", "-n", "--rule-pack", str(pack)], proj, home, timeout=150)
    assert_one_line_error(res)


def test_rule_pack_dotted_header_5000_deep(tmp_path, home):
    """CLASS 7: --rule-pack FILE with a table header [speculators.a.a.a...] 5000 keys deep and an array nested 100k deep under it. EXPECT: exit 2 with one error line, bounded, no traceback; never exit 1."""
    proj = _project(tmp_path)
    depth = 100_000
    pack = write(
        tmp_path / "fork.toml",
        "[speculators." + ".".join(["a"] * 5000) + "]\nx = " + "[" * depth + "1" + "]" * depth + "\n",
    )
    res = run_cli(["check", "pkg", "-n", "--rule-pack", str(pack)], proj, home, timeout=150)
    assert_one_line_error(res)


def test_config_file_option_deep_arrays_and_tables(tmp_path, home):
    """CLASS 7: --config FILE (a TOML settings file) with [tool.specguard] ignore nested 100k arrays deep and extend-exclude nested 50k inline tables deep. EXPECT: exit 2 with one error line, no traceback; never exit 1."""
    proj = _project(tmp_path)
    cfg = write(
        tmp_path / "settings.toml",
        "[tool.specguard]\nignore = "
        + "[" * 100_000
        + '"SG1"'
        + "]" * 100_000
        + "\nextend-exclude = "
        + "{a = " * 50_000
        + "1"
        + "}" * 50_000
        + "\n",
    )
    res = run_cli(["check", "pkg", "-n", "--config", str(cfg)], proj, home, timeout=150)
    assert_one_line_error(res)


def test_config_file_option_huge_toml(tmp_path, home):
    """CLASS 7: --config FILE of 64 MB: [tool.specguard] extend-exclude is an array of ~5M strings. EXPECT: exit 2 with one error line (a size cap), no RLIMIT (CPU 60 s, 2 GiB) hit, no traceback; never exit 1."""
    proj = _project(tmp_path)
    n = (64 * 1024 * 1024) // 14
    cfg = write(tmp_path / "settings.toml", "[tool.specguard]\nextend-exclude = [" + '"nothing/*", ' * n + "]\n")
    res = run_cli(["check", "pkg", "-n", "--config", str(cfg)], proj, home, timeout=150)
    assert_one_line_error(res)


def test_settings_file_is_fifo_or_dev_zero(tmp_path, home):
    """CLASS 7: --config names a FIFO nobody writes to, then --rule-pack names a link to /dev/zero. EXPECT: each run exits 2 with one error line, no hang, no RLIMIT hit."""
    proj = _project(tmp_path)
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli(["check", "pkg", "-n", "--config", str(fifo)], proj, home, timeout=90))
    zero = tmp_path / "pack.toml"
    os.symlink("/dev/zero", zero)
    assert_one_line_error(run_cli(["check", "pkg", "-n", "--rule-pack", str(zero)], proj, home, timeout=90))

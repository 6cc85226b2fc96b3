"""Class 7: YAML, JSON and TOML bombs and deep nesting in every input the tool reads, and malformed encodings."""

import os

from sg2harness import (
    DSPARK_DCP_YAML,
    assert_no_crash,
    assert_one_line_error,
    make_project,
    run_cli,
)

DEEP = 100_000


def config(work, vllm_src, *args):
    return run_cli(["config", "--vllm-source", str(vllm_src), *args], work)


def billion_laughs_yaml():
    levels = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        levels.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return (
        "model: m\n"
        "speculative-config:\n"
        "  method: dflash\n"
        "  model: d\n"
        "  num_speculative_tokens: 3\n"
        "  defs: [" + ", ".join(levels) + "]\n"
        "  payload: *l8\n"
    )


def test_yaml_billion_laughs(work, vllm_src):
    """CLASS 7: the serving YAML's `speculative-config` mapping holds a billion-laughs alias tree (10^9 leaves once expanded, a few hundred bytes on disk). EXPECT: within 2 GiB and 60 s CPU, no traceback; rc 0/1/2/3 and, if refused (rc 2), one error line."""
    (work / "bomb.yaml").write_text(billion_laughs_yaml())
    res = config(work, vllm_src, "bomb.yaml")
    assert_no_crash(res, (0, 1, 2, 3))
    if res.rc == 2:
        assert_one_line_error(res)


def test_yaml_deep_nesting(work, vllm_src):
    """CLASS 7: the serving YAML's `speculative-config` is a flow list nested 100,000 deep, and `compilation-config` a block mapping nested 5,000 deep. EXPECT: rc 2 with one error line each (no RecursionError, no traceback)."""
    (work / "deep1.yaml").write_text("model: m\nspeculative-config: " + "[" * DEEP + "]" * DEEP + "\n")
    block = (
        "model: m\ncompilation-config:\n"
        + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(5000))
        + "  " * 5001
        + "v\n"
    )
    (work / "deep2.yaml").write_text(block)
    for name in ("deep1.yaml", "deep2.yaml"):
        assert_one_line_error(config(work, vllm_src, name))


def test_json_on_command_line_deep_nesting(work, vllm_src):
    """CLASS 7: `vllm serve` arguments after `--` with JSON values nested 60,000 deep (`--speculative-config '[[[...]]]'`) and 20,000 deep (`--compilation-config '{"a":{"a":...}}'`). EXPECT: rc 2 with one error line each; no traceback."""
    # one argv string may hold at most 128 KiB (MAX_ARG_STRLEN): 60,000 and 20,000 levels fit
    deep_list = "[" * 60_000 + "]" * 60_000
    deep_obj = '{"a":' * 20_000 + "1" + "}" * 20_000
    assert_one_line_error(config(work, vllm_src, "--", "m", "--speculative-config", deep_list))
    assert_one_line_error(config(work, vllm_src, "--", "m", "--compilation-config", deep_obj))


def test_json_and_option_huge_integers(work, vllm_src):
    """CLASS 7: integers of 100,000 digits (over CPython's int-from-str limit) as a JSON value (`--speculative-config '{"method": "dflash", "num_speculative_tokens": 1000...}'`), a dotted value (`--speculative-config.num_speculative_tokens 1000...`) and a plain option (`-dp 1000...`). EXPECT: each refused with rc 2 and one error line, or judged (rc 0/1/3); never a traceback."""
    big = "1" + "0" * 100_000
    runs = [
        [
            "--",
            "m",
            "--speculative-config",
            '{"method": "dflash", "model": "d", "num_speculative_tokens": ' + big + "}",
        ],
        ["--", "m", "--speculative-config.method", "dflash", "--speculative-config.num_speculative_tokens", big],
        ["--", "m", "-dp", big],
    ]
    for args in runs:
        res = config(work, vllm_src, *args)
        assert_no_crash(res, (0, 1, 2, 3))
        if res.rc == 2:
            assert_one_line_error(res)


def test_dotted_keys_deep_and_repeated(work, vllm_src):
    """CLASS 7: dotted `vllm serve` keys 5,000 components deep (`--speculative-config.a.a.a....a 1`) and 20,000 repeated list-append keys (`--compilation-config.splitting_ops+ x`). EXPECT: within 2 GiB and 60 s CPU, no traceback/RecursionError; rc 0/1/2/3 and one error line if rc 2."""
    deep_key = "--speculative-config." + ".".join(["a"] * 5000)
    res = config(work, vllm_src, "--", "m", deep_key, "1")
    assert_no_crash(res, (0, 1, 2, 3))
    if res.rc == 2:
        assert_one_line_error(res)
    many = []
    for i in range(20_000):
        many += ["--compilation-config.splitting_ops+", f"op{i}"]
    res = config(work, vllm_src, "--", "m", *many)
    assert_no_crash(res, (0, 1, 2, 3))
    if res.rc == 2:
        assert_one_line_error(res)


def test_pyproject_deep_nesting(work):
    """CLASS 7: the project's pyproject.toml holds `[tool.specguard]` with `per-file-ignores` whose value is an array nested 100,000 deep, and (a second project) an inline table nested 100,000 deep. EXPECT: rc 2 with one error line naming the file; no traceback."""
    for i, value in enumerate(("[" * DEEP + "]" * DEEP, "{a = " * DEEP + "1" + "}" * DEEP)):
        root = make_project(
            work / f"proj{i}", {"pyproject.toml": "[tool.specguard]\nper-file-ignores = " + value + "\n"}
        )
        res = run_cli(["check", "."], root)
        assert_one_line_error(res)
        assert "pyproject.toml" in res.stderr, res


def test_config_rule_pack_and_hazards_deep_nesting(work, vllm_src):
    """CLASS 7: `check --config deep.toml`, `check --rule-pack deep.toml` and `config --hazards deep.toml`, where deep.toml nests arrays 100,000 deep under a real key. EXPECT: rc 2 with one error line each; no traceback."""
    root = make_project(work / "proj")
    (work / "deep-settings.toml").write_text("[tool.specguard]\nselect = " + "[" * DEEP + "]" * DEEP + "\n")
    (work / "deep-pack.toml").write_text("[speculators]\nbases = " + "[" * DEEP + "]" * DEEP + "\n")
    (work / "deep-hazards.toml").write_text("[CFG101]\nseverity = " + "[" * DEEP + "]" * DEEP + "\n")
    assert_one_line_error(run_cli(["check", ".", "--config", str(work / "deep-settings.toml")], root))
    assert_one_line_error(run_cli(["check", ".", "--rule-pack", str(work / "deep-pack.toml")], root))
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    assert_one_line_error(config(work, vllm_src, "c.yaml", "--hazards", str(work / "deep-hazards.toml")))


def test_settings_files_in_bad_encodings(work):
    """CLASS 7: the project's pyproject.toml in UTF-16 with a BOM; another's with invalid UTF-8 bytes in a `[tool.specguard]` string; a `--config` file that is UTF-8 with a BOM; a `--rule-pack` in UTF-32. EXPECT: each gives rc 2 with one error line (or, for the BOM-prefixed UTF-8 file, is read as UTF-8: rc 1 with the findings); no traceback."""
    text = '[tool.specguard]\nselect = ["SG1", "SG2"]\n'
    root0 = make_project(work / "utf16", {"pyproject.toml": text.encode("utf-16")})
    assert_one_line_error(run_cli(["check", "."], root0))
    root1 = make_project(
        work / "badutf8", {"pyproject.toml": b'[tool.specguard]\nextend-exclude = ["\xff\xfe\xc3("]\n'}
    )
    assert_one_line_error(run_cli(["check", "."], root1))
    root2 = make_project(work / "bom")
    (work / "bom.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    res = run_cli(["check", ".", "--config", str(work / "bom.toml")], root2)
    assert_no_crash(res, (1, 2))
    if res.rc == 2:
        assert_one_line_error(res)
    (work / "pack32.toml").write_bytes('[speculators]\nbases = ["X"]\n'.encode("utf-32"))
    assert_one_line_error(run_cli(["check", ".", "--rule-pack", str(work / "pack32.toml")], root2))


def test_baseline_bombs_and_bad_files(work):
    """CLASS 7: `--baseline FILE` where FILE is JSON nested 100,000 deep; a JSON integer of 100,000 digits; invalid UTF-8; UTF-16; a FIFO; a 16 GiB sparse file. EXPECT: each is an unreadable baseline: rc 2 with one error line, within 2 GiB / 60 s CPU, no hang, no traceback."""
    root = make_project(work / "proj")
    b = work / "baselines"
    b.mkdir()
    (b / "deep.json").write_text("[" * DEEP + "]" * DEEP)
    (b / "bigint.json").write_text("[" + "9" * 100_000 + "]")
    (b / "badutf8.json").write_bytes(b'[{"file": "\xff\xfe"}]')
    (b / "utf16.json").write_bytes("[]".encode("utf-16"))
    os.mkfifo(b / "fifo.json")
    with open(b / "sparse.json", "wb") as f:
        f.write(b"[")
        f.truncate(16 * 1024**3)
    for name in ("deep.json", "bigint.json", "badutf8.json", "utf16.json", "fifo.json", "sparse.json"):
        res = run_cli(["check", "pkg", "--baseline", str(b / name)], root)
        assert_one_line_error(res)


def test_yaml_bad_encodings_and_python_tags(work, vllm_src):
    """CLASS 7: serving YAML files with invalid UTF-8, with a NUL byte, in UTF-32, and with `!!python/object/apply:os.system` / `!!python/name:` tags that would create a marker file if constructed. EXPECT: each rc 2 with one error line; the marker file is never created; no traceback."""
    marker = work / "MARKER"
    files = {
        "badutf8.yaml": b"model: m\nserved-model-name: \xff\xfe\xc3(\n",
        "nul.yaml": b"model: m\x00\ntensor-parallel-size: 2\n",
        "utf32.yaml": "model: m\ntensor-parallel-size: 2\n".encode("utf-32"),
        "apply.yaml": f'model: m\nserved-model-name: !!python/object/apply:os.system ["touch {marker}"]\n'.encode(),
        "name.yaml": b"model: !!python/name:os.system\n",
        "new.yaml": f'model: m\nserved-model-name: !!python/object/new:os.system ["touch {marker}"]\n'.encode(),
    }
    for name, data in files.items():
        (work / name).write_bytes(data)
        res = config(work, vllm_src, name)
        assert_one_line_error(res)
        assert not marker.exists(), f"{name}: a YAML python tag was executed"

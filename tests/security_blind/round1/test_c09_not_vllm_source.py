"""CLASS 9: a directory that is not (or no longer) vLLM given as the served source to `specguard config
--vllm-source DIR`, with DFlash at data-parallel-size 2 and --strict. The tool must never say "no hazards
found" with exit 0: an unusable source is exit 2 with a one-line reason; a partly broken real tree is exit 2
or, with --strict, exit 3 with what it could not judge."""

import os
import random
import shutil
from pathlib import Path

from sg1harness import (
    DFLASH_DP2_YAML,
    assert_one_line_error,
    assert_sane,
    copy_tree,
    replace_file,
    run_cli,
    write,
)


def _config(tmp_path, home, served, extra=()):
    cfg = write(tmp_path / "dflash-dp2.yaml", DFLASH_DP2_YAML)
    return run_cli(["config", str(cfg), "--vllm-source", str(served), "--strict", *extra], tmp_path, home, timeout=150)


def _assert_unusable(res):
    assert "no hazards found\n" not in res.out + "\n" or "among those judged" in res.out, res.describe()
    assert_one_line_error(res)


def _assert_partly_judged(res):
    """exit 2 (one error line) or exit 3 naming what was not judged; never 0 or 'no hazards found' alone."""
    assert_sane(res, rcs=(2, 3))
    lines = [ln.strip() for ln in res.out.splitlines()]
    assert "no hazards found" not in lines, f"said 'no hazards found' about a broken source\n{res.describe()}"
    if res.rc == 3:
        assert "not judged" in res.out + res.err, f"exit 3 without saying what was not judged\n{res.describe()}"
    else:
        assert_one_line_error(res)


def test_only_vllm_init(tmp_path, home):
    """CLASS 9: --vllm-source DIR where DIR/vllm holds only __init__.py (with a __version__). EXPECT: exit 2 with one error line giving the reason; never 'no hazards found' / exit 0."""
    served = tmp_path / "served"
    write(served / "vllm" / "__init__.py", '__version__ = "0.33.0"\n')
    _assert_unusable(_config(tmp_path, home, served))


def test_random_bytes_in_vllm_layout(tmp_path, home):
    """CLASS 9: a tree with vLLM's layout (vllm/__init__.py, config/*.py, engine/arg_utils.py, entrypoints/openai/cli_args.py, v1/worker/gpu/spec_decode/...) whose .py files hold random bytes. EXPECT: exit 2 with one error line; never exit 0."""
    served = tmp_path / "served"
    rnd = random.Random(1234)
    for rel in (
        "__init__.py",
        "config/__init__.py",
        "config/vllm.py",
        "config/parallel.py",
        "config/speculative.py",
        "engine/__init__.py",
        "engine/arg_utils.py",
        "entrypoints/openai/cli_args.py",
        "v1/worker/gpu/spec_decode/speculator.py",
        "v1/worker/gpu/spec_decode/dflash/speculator.py",
    ):
        write(served / "vllm" / rel, bytes(rnd.getrandbits(8) for _ in range(4096)))
    _assert_unusable(_config(tmp_path, home, served))


def test_real_tree_without_engine_arg_utils(tmp_path, home, vllm_copy):
    """CLASS 9: a real vLLM 0.33.0 copy with vllm/engine/arg_utils.py (EngineArgs and the option definitions) deleted. EXPECT: exit 2 with one error line, or exit 3 naming what was not judged; never 'no hazards found' with exit 0."""
    (vllm_copy / "vllm" / "engine" / "arg_utils.py").unlink()
    _assert_partly_judged(_config(tmp_path, home, vllm_copy))


def test_real_tree_with_speculative_config_emptied(tmp_path, home, vllm_copy):
    """CLASS 9: a real vLLM 0.33.0 copy whose vllm/config/speculative.py is empty (0 bytes) and vllm/v1/worker/gpu/spec_decode/ removed. EXPECT: exit 2 with one error line, or exit 3 naming what was not judged; never 'no hazards found' with exit 0."""
    replace_file(vllm_copy / "vllm" / "config" / "speculative.py", b"")
    shutil.rmtree(vllm_copy / "vllm" / "v1" / "worker" / "gpu" / "spec_decode")
    _assert_partly_judged(_config(tmp_path, home, vllm_copy))


def test_real_tree_config_and_engine_modules_emptied(tmp_path, home, vllm_copy):
    """CLASS 9: a real vLLM 0.33.0 copy whose every module under vllm/config/ and vllm/engine/ is emptied (0 bytes). EXPECT: exit 2 with one error line, or exit 3 naming what was not judged; never 'no hazards found' with exit 0."""
    for sub in ("config", "engine"):
        for dirpath, dirnames, filenames in os.walk(vllm_copy / "vllm" / sub):
            for n in filenames:
                if n.endswith(".py"):
                    replace_file(Path(dirpath) / n, b"")
    _assert_partly_judged(_config(tmp_path, home, vllm_copy))


def test_tree_of_another_project(tmp_path, home):
    """CLASS 9: --vllm-source on a tree of another project (a copy of the installed `yaml` package and `pydantic` package, no vllm/ at all), then the same copy renamed to vllm/. EXPECT: both exit 2 with one error line; never exit 0."""
    import pydantic
    import yaml

    served = tmp_path / "other"
    copy_tree(Path(yaml.__file__).parent, served / "yaml")
    copy_tree(Path(pydantic.__file__).parent, served / "pydantic")
    _assert_unusable(_config(tmp_path, home, served))
    renamed = tmp_path / "renamed"
    copy_tree(Path(pydantic.__file__).parent, renamed / "vllm")
    (tmp_path / "r").mkdir()
    _assert_unusable(_config(tmp_path / "r", home, renamed))


def test_only_init_with_command_line_args(tmp_path, home):
    """CLASS 9: `specguard config --vllm-source DIR --strict -- m -dp 2 --speculative-config '{"method": "dflash", ...}'` where DIR/vllm holds only an empty __init__.py and an empty config/ package. EXPECT: exit 2 with one error line; never exit 0."""
    served = tmp_path / "served"
    write(served / "vllm" / "__init__.py", "")
    write(served / "vllm" / "config" / "__init__.py", "")
    res = run_cli(
        [
            "config",
            "--vllm-source",
            str(served),
            "--strict",
            "--",
            "Qwen/Qwen3-8B",
            "-dp",
            "2",
            "--speculative-config",
            '{"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15}',
        ],
        tmp_path,
        home,
        timeout=150,
    )
    _assert_unusable(res)


def test_fake_engine_args_defining_no_options(tmp_path, home):
    """CLASS 9: a small fake vLLM whose engine/arg_utils.py defines an EngineArgs with no fields and an add_cli_args that adds nothing, and whose config/ defines empty classes. EXPECT: exit 2 with one error line (or exit 3 naming what was not judged); never exit 0."""
    served = tmp_path / "served"
    write(served / "vllm" / "__init__.py", '__version__ = "9.9.9"\n')
    write(served / "vllm" / "engine" / "__init__.py", "")
    write(
        served / "vllm" / "engine" / "arg_utils.py",
        "from dataclasses import dataclass\n\n@dataclass\nclass EngineArgs:\n    @staticmethod\n"
        "    def add_cli_args(parser):\n        return parser\n\n    def create_engine_config(self):\n        return None\n",
    )
    write(
        served / "vllm" / "config" / "__init__.py",
        "class VllmConfig:\n    pass\n\nclass SpeculativeConfig:\n    pass\n",
    )
    _assert_partly_judged(_config(tmp_path, home, served))

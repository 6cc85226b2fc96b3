"""`specguard check` on SGLang 0.5.23's real source (issue 27): the whole tree is found and read, the PEP 420
namespace portion inside a regular package (`sglang/multimodal_gen/runtime/` has no `__init__.py`) included, and
the run prints no "cannot locate" note, no note at all, and no internal error. (With today's vLLM pack the note's
condition, a subclass naming a pack name under an unlocated ancestor, is met nowhere in SGLang even where a module
were not located: `tests/test_resolution.py` pins how a namespace portion's modules are named and located.)"""

from __future__ import annotations

from tests.conftest import run_cli, unpacked


def test_sglang_0_5_23_is_read_whole_without_a_note() -> None:
    tree = unpacked("sglang", "0.5.23")
    assert not (tree / "multimodal_gen" / "runtime" / "__init__.py").exists()  # the namespace portion is there
    assert (tree / "multimodal_gen" / "__init__.py").exists()
    out = run_cli("check", "sglang", "--no-cache", "--show-files", cwd=tree.parent)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert len(out.stdout.splitlines()) == len(list(tree.rglob("*.py")))
    out = run_cli("check", "sglang", "--no-cache", "--statistics", cwd=tree.parent)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr

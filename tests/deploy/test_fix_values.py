"""Fix texts computed by evaluating the served check on candidate values (issue 30), as blind config set 3 labels
them: the DCP sizes a layout accepts (CFG105), the draft TP sizes (CFG107), the interleave sizes a block size
accepts (CFG110), for the option the config sets (on 0.28.0 the deprecated DCP interleave option, which vLLM
copies over the CP one)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

MLA = ["deepseek-ai/DeepSeek-V2-Lite-Chat", "-tp", "2", "-dcp", "2", "--attention-backend", "TRITON_MLA"]


@pytest.mark.parametrize(
    ("version", "option"),
    [("0.31.0", "--cp-kv-cache-interleave-size"), ("0.28.0", "--dcp-kv-cache-interleave-size")],
)
def test_the_interleave_sizes_offered_are_those_the_block_size_check_accepts(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], version: str, option: str
) -> None:
    rc, out, _ = run_config("--vllm-source", str(source_dir(version)), "--", *MLA, "--block-size", "16", option, "32")
    text = " ".join(out.split())
    assert "block-size=16: CFG110 error" in text, out
    assert f"or {option[2:]} to one of the sizes this block size accepts: 1, 2, 4, 8, 16" in text, out


@pytest.mark.parametrize(("tp", "pcp", "accepted"), [("8", "1", "1, 2, 4, 8"), ("2", "2", "1, 2, 4")])
def test_the_dcp_sizes_offered_are_those_the_layout_check_accepts(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], tp: str, pcp: str, accepted: str
) -> None:
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.31.0")), "--", "m", "-tp", tp, "-pcp", pcp, "-dcp", "3")
    assert "decode-context-parallel-size=3: CFG105 error" in out, out
    assert f"accepts: {accepted}\n" in out, out


def test_the_draft_tp_sizes_offered_are_those_the_check_accepts(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path]
) -> None:
    spec = '{"method": "eagle3", "model": "a/b", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}'
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.31.0")), "--", "m", "-tp", "4", "-sc", spec)
    assert "speculative-config.draft_tensor_parallel_size=2: CFG107 error" in out, out
    assert "a size the same check accepts: 1 or 4\n" in out, out

"""Where the batch's CUDA-graph mode comes from when a function does not say (issue 28, blind set 4): a function of
no speculator that calls the sink with a padded count and has no mode in scope (a benchmark harness building with
the count padded across DP ranks) is not decided, and says so: only its callers know whether the batch replays a
FULL graph (before, it was silent); and a method's parameter left unannotated
is as the method it overrides annotates it, so a model state's `prepare_attn(self, input_batch, cudagraph_mode,
...)` that pads only under FULL is judged clean, not left undecided (vLLM 0.28.0-0.33.0's
`DiffusionGemmaModelState.prepare_attn`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

HEAD = """
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
"""

NO_MODE = """
class Harness:
    def run_once(self, num_reqs, query_start_loc, dp_sync):
        num_tokens = int(dp_sync.num_tokens_across_dp.max())
        return build_attn_metadata(
            attn_groups=self.attn_groups, num_reqs=num_reqs, query_start_loc_gpu=query_start_loc,
            num_tokens=num_tokens,  # listed
            query_start_loc_cpu=query_start_loc,
        )
"""

OVERRIDE = """
class State:
    def prepare_attn(self, input_batch, cudagraph_mode: CUDAGraphMode, attn_groups):
        raise NotImplementedError


class DiffusionState(State):
    def prepare_attn(self, input_batch, cudagraph_mode, attn_groups):
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            attn_groups=attn_groups, num_reqs=input_batch.num_reqs, num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc, query_start_loc_cpu=input_batch.query_start_loc,
        )
"""


def test_a_build_with_a_padded_count_and_no_mode_in_scope_is_listed_as_not_decided(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = HEAD + textwrap.dedent(NO_MODE)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# listed" in row)
    (tmp_path / "harness.py").write_text(text)
    out = cli("check", "harness.py", "--no-cache", "-v", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    assert out.stderr.splitlines()[-1] == (
        f"specguard: not decided: harness.py:{line}: SG103 `Harness.run_once`: `num_tokens=` of `build_attn_metadata`: "
        "no CUDA-graph mode in scope: a padded count is right only where its caller replays a FULL graph"
    )
    (tmp_path / "harness.py").write_text(
        text.replace("int(dp_sync.num_tokens_across_dp.max())", "int(query_start_loc[-1])")
    )
    out = cli("check", "harness.py", "--no-cache", "-v", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")


def test_an_override_takes_the_mode_annotation_of_the_method_it_overrides(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "state.py").write_text(HEAD + textwrap.dedent(OVERRIDE))
    out = cli("check", "state.py", "--no-cache", "-v", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")
    wrong = OVERRIDE.replace(
        "num_tokens = input_batch.num_tokens\n", "num_tokens = input_batch.num_tokens_after_padding\n"
    )
    (tmp_path / "state.py").write_text(HEAD + textwrap.dedent(wrong))
    out = cli("check", "state.py", "--no-cache", "-v", cwd=tmp_path)
    assert out.returncode == 1 and "SG103 `DiffusionState.prepare_attn`" in out.stdout, out.stdout + out.stderr

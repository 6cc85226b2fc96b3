"""What blind SGLang set 36 (issue 29) showed SG203 getting wrong, written as that set's forks are, each checked
beside SGLang 0.5.23's real tree:
- a localizer handed one DCP rank (`get_dcp_lens(lens, 1, 0)`, a wrapper's default `dcp_size=1`) hands the whole
  lengths back;
- a tensor's division written as a call (`torch.div(lens - rank - 1, size, rounding_mode="floor") + 1`) is the
  division: this rank's share, as `lens // size` is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

LENS = """
import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens


def maybe_local(lens: torch.Tensor, dcp_size: int = 1, dcp_rank: int = 0) -> torch.Tensor:
    return get_dcp_lens(lens, dcp_size, dcp_rank)


def local_lens_div(lens: torch.Tensor, dcp_size: int, dcp_rank: int) -> torch.Tensor:
    if dcp_size == 1:
        return lens
    return DIVIDED + 1
"""

DECODE = """
import flashinfer
import torch

from sglang.srt.runtime_context import get_parallel

from fork.lens import maybe_local


def decode_direct(backend, query, kv_cache, forward_batch, layer):
    parallel = get_parallel()
    assert parallel.dcp_enabled, "DCP-only launch"
    bs = forward_batch.batch_size
    meta = forward_batch.decode_trtllm_mla_metadata
    glob = forward_batch.seq_lens[:bs]
    local = maybe_local(ARGS)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=meta.block_kv_indices,
        seq_lens=local.to(torch.int32),
        max_seq_len=meta.max_seq_len_k,
        bmm1_scale=layer.scaling,
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=glob.to(torch.int32),
    )
"""


@pytest.mark.parametrize(("args", "flagged"), [("glob", True), ("glob, parallel.dcp_size, parallel.dcp_rank", False)])
def test_a_localizer_handed_one_rank_hands_back_the_whole_lengths(tmp_path: Path, args: str, flagged: bool) -> None:
    """Set 36's `trtllm_dcp_decode_direct` (`maybe_local(glob)`: its default `dcp_size=1` reaches `get_dcp_lens`)
    and its twin handing the DCP world."""
    lens = LENS.replace("DIVIDED", "lens")
    found = check_fork_beside_sglang(tmp_path, {"lens.py": lens, "decode.py": DECODE.replace("ARGS", args)})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "decode_direct")] if flagged else [])


PLAN = """
import torch

from sglang.kernels.ops.attention.flash_mla_interface import get_mla_metadata
from sglang.srt.runtime_context import get_parallel

from fork.lens import local_lens_div


def plan_decode(backend, forward_batch):
    p = get_parallel()
    seq_lens = forward_batch.seq_lens
    if p.dcp_enabled:
        kernel_lens = local_lens_div(seq_lens, p.dcp_size, p.dcp_rank).to(torch.int32)
    else:
        kernel_lens = seq_lens.to(torch.int32)
    backend.mla_metadata, backend.num_splits = get_mla_metadata(kernel_lens, backend.num_q_heads, 1)
"""


@pytest.mark.parametrize(
    ("divided", "flagged"),
    [
        ('torch.div(lens - dcp_rank - 1, dcp_size, rounding_mode="floor")', False),
        ("(lens - dcp_rank - 1).floor_divide(dcp_size)", False),
        ('torch.div(lens - dcp_rank - 1, dcp_rank + 1, rounding_mode="floor")', True),
    ],
)
def test_a_division_written_as_a_call_is_the_division(tmp_path: Path, divided: str, flagged: bool) -> None:
    """Set 36's `LabFlashMLADcpBackendV2.init_forward_metadata` (lengths localized by `torch.div`, a false positive
    before), the method form, and a division by something else than the number of DCP ranks."""
    lens = LENS.replace("DIVIDED", divided)
    found = check_fork_beside_sglang(tmp_path, {"lens.py": lens, "plan.py": PLAN})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "plan_decode")] if flagged else [])


TEMPLATE = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class TreeDraftBase:
    def __init__(self, worker):
        self.worker = worker

    def _pre_plan(self, forward_batch: ForwardBatch) -> None:
        self.worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)

    def run(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self._pre_plan(forward_batch)
        return self.worker.draft_runner.forward(forward_batch).logits_output


class TreeDraftPlanned(TreeDraftBase):
    def _pre_plan(self, forward_batch: ForwardBatch) -> None:
        super()._pre_plan(forward_batch)
        forward_batch.mark_forward_metadata_ready(MARK)
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_an_override_whose_base_method_runs_its_batch(tmp_path: Path, mark: str, flagged: bool) -> None:
    """Set 36's `TreeDraftPlannedV2._pre_plan`: the override plans and marks, and the base's `run`, which the
    subclass inherits, calls it and then runs the forward that pads the batch; and the twin marked so that a padded
    batch is planned again."""
    found = check_fork_beside_sglang(tmp_path, {"tree.py": TEMPLATE.replace("MARK", mark)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "TreeDraftPlanned._pre_plan")] if flagged else []
    )

"""What blind SGLang set 22 showed (issue 29), each case written as that set's forks are, and its finding (or its
absence) checked:
- the program view reads `namedtuple("R", [...])` (and `NamedTuple("R", [...])`) as the class it makes, and a
  record's constructor fills its fields in order: lengths split into a record (SG203) and a batch kept in a plan
  record (SG106) are followed through it;
- a bare annotation in a plain class's body (`decode_backend: TRTLLMMLABackend`) narrows what a base's constructor
  stored: the attribute is an instance of that class, whose methods run where the subclass calls them (SG203)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from specguard.program.tree import read_module
from tests.conftest import check_fork_beside_sglang

SPLIT = """
from collections import namedtuple

import torch
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

DcpLens = FACTORY


def split_dcp_lens(seq_lens):
    parallel = get_parallel()
    whole = seq_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return DcpLens(whole, whole)
    return DcpLens(get_dcp_lens(whole, parallel.dcp_size, parallel.dcp_rank).to(torch.int32), whole)


class SplitLensBackend(CuteDslMLABackend):
    def forward_decode_split(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = self.forward_decode_metadata
        lens = split_dcp_lens(forward_batch.seq_lens[: forward_batch.batch_size])
        return self._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices, seq_lens=lens.LAUNCHED,
            max_seq_len=metadata.max_seq_len_k, layer=layer, causal_seqs=lens.whole, cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank, return_lse=True,
        )
"""
_FACTORIES = {
    "a list of names": 'namedtuple("DcpLens", ["local", "whole"])',
    "a string of names": 'namedtuple("DcpLens", "local whole")',
    "typed fields": 'typing.NamedTuple("DcpLens", [("local", torch.Tensor), ("whole", torch.Tensor)])',
}


@pytest.mark.parametrize("factory", list(_FACTORIES), ids=list(_FACTORIES))
@pytest.mark.parametrize(("launched", "flagged"), [("whole", True), ("local", False)], ids=["whole", "local"])
def test_lengths_split_into_a_functional_named_tuple_are_followed(
    tmp_path: Path, factory: str, launched: str, flagged: bool
) -> None:
    """Set 22's `ForkCuteDslMLABackend.forward_decode_split_lens`: this rank's and the whole lengths returned in a
    `namedtuple`, and the whole ones launched as the lengths the kernel walks."""
    text = textwrap.dedent(SPLIT).replace("FACTORY", _FACTORIES[factory]).replace("LAUNCHED", launched)
    found = check_fork_beside_sglang(tmp_path, {"split.py": "import typing\n" + text})
    expected = [("SplitLensBackend.forward_decode_split", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


RECORD = """
from collections import namedtuple

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

PlanRecord = namedtuple("PlanRecord", ["forward_batch", "replan_equivalent"])


class StepManager:
    def __init__(self, draft_tp_worker):
        self.draft_tp_worker = draft_tp_worker

    def _plan_record(self, forward_batch: ForwardBatch, replan_equivalent: bool) -> PlanRecord:
        self.draft_tp_worker.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return PlanRecord(forward_batch, replan_equivalent)

    @staticmethod
    def _apply_record(record: PlanRecord) -> ForwardBatch:
        record.forward_batch.mark_forward_metadata_ready(replan_equivalent=record.replan_equivalent)
        return record.forward_batch

    def draft_extend_from_record(self, forward_batch: ForwardBatch):
        record = self._plan_record(forward_batch, REPLAN)
        forward_batch = self._apply_record(record)
        return self.draft_tp_worker.forward_batch_generation(batch=None, forward_batch=forward_batch, is_verify=True)
"""


@pytest.mark.parametrize(("replan", "flagged"), [("False", True), ("True", False)], ids=["kept", "re-planned"])
def test_a_batch_kept_in_a_plan_record_is_the_batch_forwarded(tmp_path: Path, replan: str, flagged: bool) -> None:
    """Set 22's `ForkSpecStepManager.draft_extend_from_record`: the planned batch travels in a `namedtuple` record,
    is marked from it, and is forwarded; marked without `replan_equivalent`, the padded batch is not planned
    again."""
    found = check_fork_beside_sglang(tmp_path, {"record.py": textwrap.dedent(RECORD).replace("REPLAN", replan)})
    expected = [("StepManager.draft_extend_from_record", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


def test_a_functional_named_tuple_is_read_as_the_class_it_makes() -> None:
    source = 'from collections import namedtuple\nR = namedtuple("R", "a, b")\nS = namedtuple("S", [x for x in y])\n'
    parsed = read_module("m", Path("m.py"), False, ast.parse(source))
    assert list(parsed.classes) == ["R"]
    assert list(parsed.classes["R"].annotations) == ["a", "b"]
    assert parsed.classes["R"].node.lineno == 2
    assert "S" in parsed.assigns and "R" not in parsed.assigns  # a comprehension's fields are not written out


HYBRID = """
import torch
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


class HybridDecodeBackend(HybridAttnBackend):
    decode_backend: TRTLLMMLABackend

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        backend = self.decode_backend
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return backend.forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        metadata = backend.forward_decode_metadata
        seq_lens = LENS
        return backend._run_decode_kernel(
            query=q, kv_cache=layer.kv, block_tables=metadata.block_kv_indices, seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k, layer=layer, return_lse=True,
        )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [
        ("forward_batch.seq_lens[: forward_batch.batch_size]", True),
        ("get_dcp_lens(forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank)", False),
    ],
    ids=["the whole lengths", "this rank's share"],
)
def test_a_declared_attribute_is_an_instance_of_the_class_it_names(tmp_path: Path, lens: str, flagged: bool) -> None:
    """Set 22's `ForkHybridTrtllmDecodeBackend.forward_decode`: SGLang's `HybridAttnBackend` stores the decode
    backend it is handed; the fork declares it a `TRTLLMMLABackend` and calls that backend's `_run_decode_kernel`,
    which launches the MLA decode."""
    found = check_fork_beside_sglang(tmp_path, {"hybrid.py": textwrap.dedent(HYBRID).replace("LENS", lens)})
    expected = [("HybridDecodeBackend.forward_decode", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings

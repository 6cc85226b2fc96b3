"""What blind SGLang set 28 (issue 29) showed SG106 missing, written as that set's fork is, each checked beside
SGLang 0.5.23's real tree with its finding (or its absence):

- the plan made by a handler looked up in a dict the constructor fills with the instance's own methods, or by a
  `functools.partial` of a planning helper stored on the instance;
- the batch carried in a dataclass handed to the step (`ctx: StepContext` with a `forward_batch: ForwardBatch`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

HANDLERS = """
import functools
from typing import Callable, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


def preplan(attn_backend, forward_batch: ForwardBatch, *, replan_equivalent: bool = False) -> bool:
    if forward_batch.forward_mode.is_idle():
        return False
    attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    return True


class ModeHandlers:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self._handlers: Dict[ForwardMode, Callable[[ForwardBatch], None]] = {
            ForwardMode.DECODE: self._plan_decode,
            ForwardMode.EXTEND: self._plan_decode,
        }
        self._preplan = functools.partial(preplan, self.model_runner.attn_backend, replan_equivalent=EQUIVALENT)

    def _plan_decode(self, forward_batch: ForwardBatch) -> None:
        self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=EQUIVALENT)

    def dispatch(self, forward_batch: ForwardBatch):
        handler = self._handlers.get(forward_batch.forward_mode)
        if handler is not None:
            handler(forward_batch)
        return self.model_runner.forward(forward_batch)

    def through_partial(self, forward_batch: ForwardBatch):
        self._preplan(forward_batch)
        return self.model_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("equivalent", "flagged"), [("False", 2), ("True", 0)], ids=["marked", "re-plannable"])
def test_a_plan_by_a_handler_or_a_partial_kept_on_the_instance(tmp_path: Path, equivalent: str, flagged: int) -> None:
    """Set 28's `ModeHandlerTable.dispatch` and `forward_via_plan_partial` (and `dispatch_replannable`)."""
    found = check_fork_beside_sglang(
        tmp_path, {"handlers.py": textwrap.dedent(HANDLERS).replace("EQUIVALENT", equivalent)}
    )
    assert [f.code for f in found.findings] == ["SG106"] * flagged, found.findings


CONTEXT = """
from dataclasses import dataclass, field
from typing import Any, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


@dataclass
class StepContext:
    forward_batch: ForwardBatch
    runner: ModelRunner
    attn_backend: Any
    use_graph: bool = False
    planned: bool = False
    extras: Dict[str, Any] = field(default_factory=dict)


class Scheduler:
    def launch_step(self, ctx: StepContext):
        fb = ctx.forward_batch
        if not ctx.use_graph:
            PLAN
        return ctx.runner.forward(fb)
"""


@pytest.mark.parametrize(
    ("plan", "flagged"),
    [
        ("ctx.attn_backend.init_forward_metadata(fb); fb.mark_forward_metadata_ready()", True),
        ("ctx.planned = False", False),
    ],
    ids=["planned ahead", "left to the forward"],
)
def test_a_batch_carried_in_a_dataclass_handed_in(tmp_path: Path, plan: str, flagged: bool) -> None:
    """Set 28's `OverlapScheduler.launch_step`: the batch is the record's field, which its caller filled."""
    found = check_fork_beside_sglang(tmp_path, {"context.py": textwrap.dedent(CONTEXT).replace("PLAN", plan)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else []), found.findings


RECORD = """
from dataclasses import dataclass
from typing import Optional

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


@dataclass
class DcpDecodeMetadata:
    local_seq_lens: torch.Tensor
    global_seq_lens: torch.Tensor
    batch_size: int


class ForkDcpDecodeBackend(TRTLLMMLABackend):
    fork_metadata: Optional[DcpDecodeMetadata] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        if bs == 0:
            self.fork_metadata = None
            return
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self.fork_metadata = DcpDecodeMetadata(
            local_seq_lens=self._get_dcp_local_seq_lens(global_lens), global_seq_lens=global_lens, batch_size=bs
        )

    def _metadata_for(self, forward_batch: ForwardBatch) -> DcpDecodeMetadata:
        md = self.fork_metadata
        if md is None or md.batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            md = self.fork_metadata
        return md

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        return trtllm_batch_decode_with_kv_cache_mla(
            query=q.unsqueeze(1),
            kv_cache=self._paged_kv(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=self.block_kv_indices,
            seq_lens=md.LENS[:bs],
            max_seq_len=self.max_context_len,
            bmm1_scale=layer.scaling,
        )
"""


@pytest.mark.parametrize(("lens", "flagged"), [("global_seq_lens", True), ("local_seq_lens", False)])
def test_lengths_in_a_record_the_planning_method_keeps_on_the_backend(tmp_path: Path, lens: str, flagged: bool) -> None:
    """Set 28's `MetadataGlobalDecodeBackend.forward_decode`: `init_forward_metadata` keeps a record of both lengths
    on the backend (None for an empty batch), and the decode launches with one of them."""
    found = check_fork_beside_sglang(tmp_path, {"backend.py": textwrap.dedent(RECORD).replace("LENS", lens)})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else []), found.findings

"""Idioms blind SGLang set 41 (`tests/corpus/blind_sglang_r41`, a fork of the MLA backends in a functional style)
showed the evaluation misjudging, each checked beside SGLang 0.5.23's real source. Each flagged case was missed on
f23fc23 (or each clean one flagged there), and its twin is the same shape done right (or wrong)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

FLASHMLA_PORT = """
import torch

from sglang.kernels.ops.attention.flash_mla_interface import flash_mla_with_kvcache, get_mla_metadata
from sglang.srt.layers.attention.flashmla_backend import PAGE_SIZE, FlashMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class PortedFlashMLABackend(FlashMLABackend):
    def decode_on_this_rank(self, q, layer, forward_batch: ForwardBatch, block_table):
        assert forward_batch.forward_mode.MODE()
        parallel = get_parallel()
        bs = forward_batch.batch_size
        lens = get_dcp_lens(forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)
        metadata, num_splits = get_mla_metadata(lens, self.num_q_heads, 1)
        o, lse = flash_mla_with_kvcache(
            q=q.view(bs, -1, layer.tp_q_head_num, layer.head_dim),
            k_cache=paged_view(self.token_to_kv_pool.get_key_buffer(layer.layer_id), PAGE_SIZE),
            block_table=block_table,
            cache_seqlens=lens,
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=metadata,
            num_splits=num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
        return (o, lse) if parallel.dcp_enabled else o
"""


@pytest.mark.parametrize(
    ("mode", "flagged"), [("is_decode_or_idle", False), ("is_decode", False), ("is_target_verify", True)]
)
def test_sg203_a_query_of_a_path_that_asserted_a_decode_has_one_token_per_request(
    tmp_path: Path, mode: str, flagged: bool
) -> None:
    """Set 41's FlashMLA ports (`ForkFlashMLABackend.forward_decode_dcp_planned`): a method the framework does not
    call by name, which asserts its batch is a decode, views its query `q.view(bs, -1, heads, dim)`: one token per
    request, so FlashMLA taking no global causal bound is right. Asserting a target verify instead, the `-1` is its
    draft tokens: a multi-token query with no global bound under DCP."""
    found = check_fork_beside_sglang(tmp_path, {"flashmla_port.py": FLASHMLA_PORT.replace("MODE", mode)})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else [])
    if flagged:
        assert "more than one token per request" in found.findings[0].message


KEPT_LENS = """
import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class RelocalizingBackend(CuteDslMLABackend):
    def decode_from_metadata(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        GUARD
        local_lens = self._get_dcp_local_seq_lens(metadata.LENS[:bs])
        return self._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices, seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k, layer=layer, causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size, cp_rank=parallel.dcp_rank, return_lse=True,
        )
"""


@pytest.mark.parametrize(
    ("lens", "guard", "flagged"),
    [
        ("seq_lens_k", "", True),
        ("global_seq_lens_k", "", False),
        # where the whole lengths' field is unset, the framework never made `seq_lens_k` this rank's share
        ("seq_lens_k", "if metadata.global_seq_lens_k is not None: raise NotImplementedError", False),
    ],
)
def test_sg203_lengths_read_from_the_field_that_holds_this_ranks_share_are_not_localized_again(
    tmp_path: Path, lens: str, guard: str, flagged: bool
) -> None:
    """Set 41's `ForkCuteDslMLABackend.decode_dcp_metadata_lens`: SGLang's MLA backends leave this rank's share in
    `metadata.seq_lens_k` under DCP (the whole lengths in `global_seq_lens_k`), so localizing what is read from
    it is a share of a share. Its twins localize the whole lengths, or read `seq_lens_k` only where the backend
    never localized it."""
    text = KEPT_LENS.replace("LENS", lens).replace("GUARD", guard or "pass")
    found = check_fork_beside_sglang(tmp_path, {"kept.py": text})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else [])
    if flagged:
        assert "localized twice" in found.findings[0].message


ROLE_MAP = """
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class RoleMapBackend(CuteDslMLABackend):
    def decode_by_role(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        lens_by_role = {"rank_local": metadata.seq_lens_k[:bs], "global": metadata.global_seq_lens_k[:bs]}
        roles = {"seq_lens": "ROLE", "causal_seqs": "global"}
        return self._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
            seq_lens=lens_by_role[roles["seq_lens"]], max_seq_len=metadata.max_seq_len_k, layer=layer,
            causal_seqs=lens_by_role[roles["causal_seqs"]], cp_world=parallel.dcp_size, cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
"""


@pytest.mark.parametrize(("role", "flagged"), [("rank_local", False), ("global", True)])
def test_sg203_a_lookup_in_a_dict_of_lengths_gets_the_item_looked_up(tmp_path: Path, role: str, flagged: bool) -> None:
    """Blind set 42's `CuteDslRoleMapMLABackend.forward_decode`: lengths kept in a dict by role and looked up by
    a key another dict gives. The lookup read every item's lengths, so this rank's share looked like the whole."""
    found = check_fork_beside_sglang(tmp_path, {"roles.py": ROLE_MAP.replace("ROLE", role)})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else [])


STEPS = """
from functools import reduce
from types import SimpleNamespace

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


def step_plan(state):
    state["backend"].init_forward_metadata(state["fb"])
    return state


def step_mark(state):
    state["fb"].mark_forward_metadata_ready(MARK)
    return state


def step_forward(state):
    state["out"] = state["runner"].forward(state["fb"]).logits_output
    return state


PIPELINES = {"draft_extend": [step_plan, step_mark, step_forward]}

ACTIONS = {
    "plan": lambda st: st.backend.init_forward_metadata(st.fb),
    "mark": lambda st: st.fb.mark_forward_metadata_ready(MARK),
    "forward": lambda st: st.runner.forward(st.fb),
}


def compose(*steps):
    def run(state):
        for step in steps:
            state = step(state)
        return state

    return run


def _state(runner, fb):
    return {"runner": runner, "backend": runner.attn_backend, "fb": fb, "out": None}


def run_named_pipeline(runner: ModelRunner, fb: ForwardBatch):
    state = _state(runner, fb)
    for step in PIPELINES["draft_extend"]:
        state = step(state)
    return state["out"]


def run_action_table(runner: ModelRunner, fb: ForwardBatch):
    st = SimpleNamespace(runner=runner, backend=runner.attn_backend, fb=fb)
    for name in ("plan", "mark"):
        ACTIONS[name](st)
    return ACTIONS["forward"](st).logits_output


def run_composed(runner: ModelRunner, fb: ForwardBatch):
    return compose(step_plan, step_mark, step_forward)(_state(runner, fb))["out"]
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_sg106_a_forward_reached_through_steps_kept_in_tables_closures_and_lambdas(
    tmp_path: Path, mark: str, flagged: bool
) -> None:
    """Set 41's pipelines: the plan, the mark and the forward are steps of a module's table, lambdas kept in a dict
    and called on a `SimpleNamespace`, or functions a closure runs in turn. The table was not read as reaching a
    plan, a lambda's call was not the judged function's own, a namespace had no fields, and a closure's run was
    left to be judged alone (it never is)."""
    found = check_fork_beside_sglang(tmp_path, {"steps.py": STEPS.replace("MARK", mark)})
    judged = sorted((f.symbol or "").rpartition(".")[2] for f in found.findings if f.code == "SG106")
    assert judged == (["run_action_table", "run_composed", "run_named_pipeline"] if flagged else [])


DECORATED = """
import functools

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils.common import require_mlp_sync


def single_rank_only(fallback):
    def deco(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if require_mlp_sync():
                return fallback(*args, **kwargs)
            return fn(*args, **kwargs)

        return inner

    return deco


def timed(label):
    def deco(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **kwargs)

        return inner

    return deco


def _plain_forward(runner: ModelRunner, fb: ForwardBatch):
    return runner.forward(fb).logits_output


@DECORATOR
def draft_extend(runner: ModelRunner, fb: ForwardBatch):
    runner.attn_backend.init_forward_metadata(fb)
    fb.mark_forward_metadata_ready()
    return runner.forward(fb).logits_output
"""


@pytest.mark.parametrize(
    ("decorator", "flagged"), [("timed('draft')", True), ("single_rank_only(fallback=_plain_forward)", False)]
)
def test_sg106_a_function_runs_as_its_own_decorators_wrap_it(tmp_path: Path, decorator: str, flagged: bool) -> None:
    """Set 41's `switched_draft_extend` (a false positive): its decorator runs it only without DP attention and
    hands a padded batch to a fallback that plans it. A timing decorator runs it as it is."""
    found = check_fork_beside_sglang(tmp_path, {"decorated.py": DECORATED.replace("DECORATOR", decorator)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else [])
    if flagged:
        assert "as its decorators wrap it" in found.findings[0].message


THROUGH_WORKER = """
import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2


class ForkDraftWorker(EagleDraftWorker):
    def _extend_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(batch, self.draft_runner)


class ForkWorker(EAGLEWorkerV2):
    def draft_extend_through_worker(self, batch: ScheduleBatch):
        dw: ANNOTATION = self._draft_worker
        forward_batch = dw._extend_batch(batch)
        dw.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return dw.draft_worker.forward_batch_generation(batch=None, forward_batch=forward_batch)
"""


@pytest.mark.parametrize(("annotation", "flagged"), [("ForkDraftWorker", True), ("object", False)])
def test_sg106_a_local_annotated_with_a_class_of_its_package_runs_its_methods(
    tmp_path: Path, annotation: str, flagged: bool
) -> None:
    """Set 41's `ForkEAGLEWorkerV2.draft_extend_through_worker`: the draft worker held in a local annotated with the
    fork's class, whose method builds the batch. Its methods were known by name only, so the batch was lost; one
    annotated with no class of the fork stays unknown (nothing to judge)."""
    found = check_fork_beside_sglang(tmp_path, {"through.py": THROUGH_WORKER.replace("ANNOTATION", annotation)})
    assert [f.code for f in found.findings] == (["SG106"] if flagged else [])

"""What blind SGLang set 21 showed (issue 29), each case written as that set's forks are, and its finding (or its
absence) checked:
- SG203: a backend whose constructor refuses DCP together with speculative decoding never runs a query of several
  tokens per request under DCP (`[dcp] speculative_tests`); a mixin's method runs on the class that mixes it in,
  whose methods its `self` calls reach; a method that never asks whether DCP is on is judged as its class's
  methods that call it once they have asked run it;
- SG106: a batch built field by field without per-rank DP counts is never padded by the model runner; an override
  of the model runner's own padding step is followed by the forward the framework runs right after it; a question
  asked with no argument (`forward_batch.forward_mode.is_idle()`) that a test on the path answered answers the same
  when a callee asks it again; and (set 19's) a forward told to plan again (`reinit_attn_backend=True`, the pack's
  `replan_keywords`) plans the batch it runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

REFUSING = """
import flashinfer
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel, get_spec

class NoSpecDcpBackend(TRTLLMMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        if get_parallel().dcp_enabled REFUSAL:
            raise ValueError("decode context parallel cannot serve speculative decoding here")
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    def verify(self, q, layer, forward_batch, md):
        if not get_parallel().dcp_enabled:
            return None
        bs = forward_batch.batch_size
        n = forward_batch.spec_info.draft_token_num
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q.view(bs, n, layer.tp_q_head_num, layer.head_dim),
            kv_cache=layer.kv, workspace_buffer=self.workspace_buffer, qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices, seq_lens=md.seq_lens_k, max_seq_len=md.max_seq_len_k + n,
        )
"""


@pytest.mark.parametrize(
    ("refusal", "flagged"),
    [
        ("and get_spec().speculative_algorithm is not None", False),
        ("and get_spec().speculative_num_draft_tokens", False),
        ("and get_spec().speculative_algorithm == 'NGRAM'", True),
    ],
    ids=["refused with any speculation", "refused with draft tokens", "refused with one algorithm only"],
)
def test_a_constructor_refusing_dcp_with_speculation_runs_no_verify_under_dcp(
    tmp_path: Path, refusal: str, flagged: bool
) -> None:
    """Set 21's `NoSpecDcpTRTLLMBackend.forward_extend`: its constructor refuses DCP with speculative decoding, as
    SGLang 0.5.23's `create_trtllm_mla_backend` refuses that pair, so its target verify never runs under DCP."""
    found = check_fork_beside_sglang(tmp_path, {"nospec.py": textwrap.dedent(REFUSING).replace("REFUSAL", refusal)})
    expected = [("NoSpecDcpBackend.verify", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


MIXIN = """
import torch
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class DcpDecodeMixin:
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return None
        global_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        local_lens = LOCAL
        return self._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=md.block_kv_indices, seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k, layer=layer, causal_seqs=global_lens, cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank, return_lse=True,
        )

class MixedBackend(DcpDecodeMixin, CuteDslMLABackend):
    pass
"""


@pytest.mark.parametrize(
    ("local", "flagged"),
    [
        ("global_lens.to(torch.int32)", True),
        ("get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(torch.int32)", False),
    ],
    ids=["the whole lengths", "this rank's share"],
)
def test_a_mixins_method_runs_on_the_class_that_mixes_it_in(tmp_path: Path, local: str, flagged: bool) -> None:
    """Set 21's `GraphAwareDcpDecodeMixin._dcp_decode`: the mixin defines no `_run_decode_kernel`; the one class of
    its module that mixes it in gets SGLang's cute-dsl backend's, which launches the MLA decode."""
    found = check_fork_beside_sglang(tmp_path, {"mixin.py": textwrap.dedent(MIXIN).replace("LOCAL", local)})
    expected = [("DcpDecodeMixin._dcp_decode", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


ROUTED = """
import torch
import flashinfer
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

class RoutingBase(TRTLLMMLABackend):
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       cos_sin_cache=None, is_neox=False, llama_4_scaling=None):
        if not forward_batch.forward_mode.is_draft_extend_v2() or not ASKED:
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                                          cos_sin_cache, is_neox, llama_4_scaling)
        return self._dcp_spec_forward(q, layer, forward_batch)

    def _dcp_spec_forward(self, query, layer, forward_batch):
        raise NotImplementedError

class DraftExtendBackend(RoutingBase):
    def _dcp_spec_forward(self, query, layer, forward_batch):
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        padded_q = query.new_zeros((bs, max_q, layer.tp_q_head_num, layer.head_dim))
        md = self.forward_decode_metadata
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=padded_q, kv_cache=layer.kv, workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim, kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim, block_tables=md.block_kv_indices, seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k + max_q,
        )
"""


@pytest.mark.parametrize(
    ("asked", "flagged"),
    [("get_parallel().dcp_enabled", True), ("getattr(self, 'fork_route', False)", False)],
    ids=["called under DCP", "called on another switch"],
)
def test_a_method_that_never_asks_is_judged_as_its_callers_call_it(tmp_path: Path, asked: str, flagged: bool) -> None:
    """Set 21's `DcpDraftExtendTRTLLMBackend._dcp_spec_forward`: it launches a draft extend's query of several tokens
    per request without the global causal bound, and only its base's `forward_extend` asks whether DCP is on before
    calling it."""
    found = check_fork_beside_sglang(tmp_path, {"routed.py": textwrap.dedent(ROUTED).replace("ASKED", asked)})
    expected = [("DraftExtendBackend._dcp_spec_forward", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


WARM_UP = """
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

def warm_eager_decode(model_runner, bs):
    seq_lens = torch.full((bs,), 1, dtype=torch.int64)
    forward_batch = ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=torch.zeros((bs,), dtype=torch.int64),
        req_pool_indices=torch.zeros((bs,), dtype=torch.int64), seq_lens=seq_lens, seq_lens_cpu=seq_lens.cpu(),
        out_cache_loc=torch.zeros((bs,), dtype=torch.int64), seq_lens_sum=bs,
        positions=torch.zeros((bs,), dtype=torch.int64)COUNTS,
    )
    model_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    model_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(
    ("counts", "flagged"),
    [("", False), (", global_num_tokens_cpu=None", False), (", global_num_tokens_cpu=[bs, bs + 1]", True)],
    ids=["no per-rank counts", "counts given as None", "per-rank counts given"],
)
def test_a_batch_built_without_dp_counts_is_not_padded(tmp_path: Path, counts: str, flagged: bool) -> None:
    """Set 21's `warm_eager_decode`: a batch built field by field with no per-rank DP counts is one the model
    runner's `_prepare_eager_forward_batch` does not pad, so a plan made before its forward is for the batch it
    runs."""
    found = check_fork_beside_sglang(tmp_path, {"warm.py": textwrap.dedent(WARM_UP).replace("COUNTS", counts)})
    expected = [("warm_eager_decode", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


PAD_STEP = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

class EarlyPlanModelRunner(ModelRunner):
    def _prepare_eager_forward_batch(self, forward_batch: ForwardBatch) -> None:
        BODY
"""
_PLAN_THEN_PAD = """early = forward_batch.forward_mode.is_draft_extend_v2()
        if early:
            self.attn_backend.init_forward_metadata(forward_batch)
        super()._prepare_eager_forward_batch(forward_batch)
        if early:
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)"""
_PAD_THEN_PLAN = """super()._prepare_eager_forward_batch(forward_batch)
        if forward_batch.forward_mode.is_draft_extend_v2():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()"""


@pytest.mark.parametrize(
    ("body", "flagged"), [(_PLAN_THEN_PAD, True), (_PAD_THEN_PLAN, False)], ids=["plan, pad, mark", "pad, then plan"]
)
def test_an_override_of_the_padding_step_is_followed_by_the_forward(tmp_path: Path, body: str, flagged: bool) -> None:
    """Set 21's `OverlapPlanModelRunner._prepare_eager_forward_batch`: it plans, lets SGLang pad, then marks the
    batch ready with the padded shapes, so the eager runner's `execute` that `_forward_raw` runs next does not plan
    the padded batch again."""
    found = check_fork_beside_sglang(tmp_path, {"runner.py": textwrap.dedent(PAD_STEP).replace("BODY", body)})
    expected = [("EarlyPlanModelRunner._prepare_eager_forward_batch", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings
    if flagged:
        assert "after this padding step (`eager_runner.execute`)" in found.findings[0].message


FROZEN_KV = """
from sglang.srt.utils.common import require_mlp_sync
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPDraftWorker

class GuardedFrozenKVDraftWorker(FrozenKVMTPDraftWorker):
    def _run_seed_step(self, forward_batch: ForwardBatch):
        if require_mlp_sync() and not forward_batch.forward_mode.is_idle():
            GUARD
        self._init_frozen_kv_metadata(forward_batch)
        return self.draft_model_runner.forward(forward_batch).logits_output
"""


@pytest.mark.parametrize(
    ("guard", "flagged"),
    [('raise NotImplementedError("eager frozen-KV drafting is single-DP only")', False), ("pass", True)],
    ids=["refused under DP unless idle", "not refused"],
)
def test_a_question_a_test_answered_answers_the_same_on_its_path(tmp_path: Path, guard: str, flagged: bool) -> None:
    """Set 21's `DpGuardedFrozenKVDraftWorker._run_seed_step`: past its refusal, with DP attention on, the batch is
    idle (`forward_mode.is_idle()` held), and SGLang's `_init_frozen_kv_metadata` asks the same question and plans
    nothing for an idle batch."""
    found = check_fork_beside_sglang(tmp_path, {"frozen.py": textwrap.dedent(FROZEN_KV).replace("GUARD", guard)})
    expected = [("GuardedFrozenKVDraftWorker._run_seed_step", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


SPLIT_PREFILL = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

class PreplannedModelRunner(ModelRunner):
    def forward_split_prefill_preplanned(self, forward_batch: ForwardBatch, forward_count: int = 1):
        MODE
        if forward_batch.split_index == 0:
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward(forward_batch, REINIT split_forward_count=forward_count)
"""


@pytest.mark.parametrize(
    ("mode", "reinit", "flagged"),
    [
        ("assert forward_batch.forward_mode.is_split_prefill()", "reinit_attn_backend=True,", False),
        ("assert forward_batch.forward_mode.is_split_prefill()", "", True),
        ("assert forward_batch.forward_mode.is_draft_extend_v2()", "reinit_attn_backend=True,", True),
    ],
    ids=["split prefill, re-initialised", "split prefill, not", "draft extend, re-initialised"],
)
def test_a_forward_told_to_plan_again_plans_the_batch_it_runs(
    tmp_path: Path, mode: str, reinit: str, flagged: bool
) -> None:
    """Set 19's `PreplannedModelRunner.forward_split_prefill_preplanned`: planned early, then forwarded with
    `reinit_attn_backend=True` (the pack's `replan_keywords`), which SGLang honours on a split prefill (the pack's
    `replan_when`) and nowhere else (set 21's `StandaloneDraftDriver.extend_with_reinit`, a draft extend)."""
    text = textwrap.dedent(SPLIT_PREFILL).replace("REINIT", reinit).replace("MODE", mode)
    found = check_fork_beside_sglang(tmp_path, {"split.py": text})
    expected = [("PreplannedModelRunner.forward_split_prefill_preplanned", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings

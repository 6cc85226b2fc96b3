"""What blind SGLang set 16 showed (issue 29), each case written as that set's backend or worker is and its finding
(or its absence) checked:
- a parameter the function's own code treats as the whole lengths (handed to a localizer through a helper, or
  stored as the whole lengths) is judged as them, where nothing calls the function;
- a query of several tokens per request in three more forms: a view whose token axis is `-1` (SGLang's target
  verify), a buffer made by `torch.zeros((bs, max_q, heads, dim))`, and a flat query launched with its offsets
  (`cum_seq_lens_q=`);
- a forward whose skip keyword the function does not decide is a finding where the batch's predicate says not to
  plan either, and not decided where the class overrides the runner's own padding step."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source, check_source_judged
from tests.conftest import check_fork_beside_sglang

SWAPPED = """
import flashinfer
import torch
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

def verify_lens(seq_lens, num_draft_tokens):
    whole = (seq_lens + num_draft_tokens).to(torch.int32)
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return whole, whole
    return whole, get_dcp_lens(whole, parallel.dcp_size, parallel.dcp_rank)

def launch_window(query, kv_cache, block_tables, seq_lens, num_draft_tokens):
    ORDER = verify_lens(seq_lens, num_draft_tokens)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv_cache, block_tables=block_tables, seq_lens=local_lens, max_seq_len=4096,
        causal_seqlens_kv_global=global_lens, return_lse=True, backend="cute-dsl",
    )
"""


@pytest.mark.parametrize(
    ("order", "flagged"),
    [("local_lens, global_lens", True), ("global_lens, local_lens", False)],
    ids=["swapped", "in order"],
)
def test_a_parameter_the_function_localizes_itself_is_the_whole_lengths(order: str, flagged: bool) -> None:
    """Set 16's `launch_verify_window`: `seq_lens` is the function's parameter and nothing calls it, but it hands
    them to a helper that localizes them, so they are the whole lengths; the swapped unpacking launches them."""
    found, judged = check_source_judged(textwrap.dedent(SWAPPED).replace("ORDER", order))
    assert [f.code for f in found] == (["SG203"] if flagged else []), found
    if flagged:
        assert "the whole lengths by its own `get_dcp_lens`" in found[0].message
    assert not [j for j in judged if j.code == "SG203" and not j.decided], judged


STORED = """
import flashinfer
import torch
from sglang.srt.runtime_context import get_parallel

class ReplayBackend:
    def replay_and_decode(self, query, kv_cache, metadata, seq_lens):
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k.copy_(seq_lens)
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query.view(-1, 1, 16, 576), kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
                seq_lens=LENS, max_seq_len=4096, return_lse=True,
            )
"""


@pytest.mark.parametrize(("lens", "flagged"), [("seq_lens", True), ("metadata.seq_lens_k", False)])
def test_a_parameter_stored_as_the_whole_lengths_is_them(lens: str, flagged: bool) -> None:
    """`metadata.global_seq_lens_k.copy_(seq_lens)`: the function says its parameter is the whole lengths."""
    codes = [f.code for f in check_source(textwrap.dedent(STORED).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes


QUERIES = """
import flashinfer
import torch
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class VerifyBackend:
    def forward_verify(self, q, kv_cache, metadata, forward_batch, layer):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        lens = get_dcp_lens(metadata.global_seq_lens_k[:bs], parallel.dcp_size, parallel.dcp_rank)
        QUERY
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices, seq_lens=lens,
            max_seq_len=4096, return_lse=True, EXTRA
        )
"""


@pytest.mark.parametrize(
    ("query", "extra", "flagged"),
    [
        ("query = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)", "", True),
        ("query = q.view(-1, layer.tp_q_head_num, layer.head_dim).unsqueeze(1)", "", False),
        ("query = torch.zeros((bs, max(forward_batch.extend_seq_lens_cpu), 16, 576))", "", True),
        ("query = torch.zeros((bs, 1, 16, 576))", "", False),
        ("query = q.view(-1, 16, 576)", "cum_seq_lens_q=forward_batch.spec_info.qo_indptr,", True),
        ("query = q.view(-1, 16, 576)", "cum_seq_lens_q=None,", False),
        (
            "query = q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)",
            "causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],",
            False,
        ),
    ],
    ids=["inferred tokens", "one token", "made buffer", "made one-token buffer", "ragged", "not ragged", "bounded"],
)
def test_a_multi_token_query_in_each_form_needs_the_bound(query: str, extra: str, flagged: bool) -> None:
    """Set 16's `forward_target_verify_direct` (`q.view(bs, -1, ...)`), `forward_draft_extend` (a `torch.zeros`
    buffer the ragged query is padded into) and `verify_ragged` (`cum_seq_lens_q=`)."""
    found = check_source(textwrap.dedent(QUERIES).replace("QUERY", query).replace("EXTRA", extra))
    assert [f.code for f in found] == (["SG203"] if flagged else []), found
    if flagged:
        assert "more than one token per request" in found[0].message


RUNNER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

class PrePlanRunner(ModelRunner):
    def forward(self, forward_batch: ForwardBatch, skip_attn_backend_init=None, pp_proxy_tensors=None):
        if forward_batch.forward_mode.is_decode() and forward_batch.needs_forward_metadata_init():
            self.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return super().forward(
            forward_batch, skip_attn_backend_init=skip_attn_backend_init, pp_proxy_tensors=pp_proxy_tensors
        )
    OVERRIDE
"""
OWN_PADDING = """
    def _prepare_eager_forward_batch(self, forward_batch):
        padded = super()._prepare_eager_forward_batch(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        return padded
"""


@pytest.mark.parametrize(("override", "decided"), [("", True), (OWN_PADDING, False)], ids=["plain", "own padding"])
def test_a_skip_keyword_handed_on_is_judged_by_the_predicate(tmp_path: Path, override: str, decided: bool) -> None:
    """Set 16's `DraftDecodePrePlanRunner.forward`: it plans and marks, then hands its own `skip_attn_backend_init`
    to `ModelRunner.forward`, which pads for DP attention; skipped or not, the marked batch is not planned again.
    A class that overrides the runner's padding step (set 11's `ReplanAfterPadModelRunner`) is not decided."""
    runner = textwrap.dedent(RUNNER).replace("    OVERRIDE", override)
    result = check_fork_beside_sglang(tmp_path, {"runner.py": runner})
    assert [(f.code, f.symbol) for f in result.findings] == ([("SG106", "PrePlanRunner.forward")] if decided else []), (
        result.findings
    )
    if not decided:
        assert any("skip_attn_backend_init" in str(u) for u in result.undecided), result.undecided

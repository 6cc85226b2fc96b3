"""What blind SGLang set 23 showed (issue 29), written as that set's forks are, and its finding (or its absence)
checked (SG203): a method decorated with a function of the tree (`@rank_local_lens`) is what the decorator returns,
so the lengths its wrapper hands the method are the ones launched; and a question a test answered on the path
(`forward_batch.forward_mode.is_draft_extend_v2()`) answers the same when the function asks it again."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

DECORATED = """
import functools

import flashinfer
import torch
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def rank_local_lens(fn):
    @functools.wraps(fn)
    def wrapped(self, *args, seq_lens, **kwargs):
        parallel = get_parallel()
        if parallel.dcp_enabled:
            seq_lens = SHARE
        return fn(self, *args, seq_lens=seq_lens.to(torch.int32), **kwargs)

    return wrapped


class DecoratedLaunchBackend(TRTLLMMLABackend):
    @rank_local_lens
    def _launch_local(self, query, kv_cache, block_tables, max_seq_len, *, seq_lens):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim, kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim, block_tables=block_tables, seq_lens=seq_lens,
            max_seq_len=max_seq_len, return_lse=True,
        )

    def forward_dcp_decode(self, query, kv_cache, forward_batch):
        if not get_parallel().dcp_enabled:
            return None
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs]
        return self._launch_local(
            query, kv_cache, metadata.block_kv_indices, metadata.max_seq_len_k, seq_lens=global_lens
        )
"""


@pytest.mark.parametrize(
    ("share", "flagged"),
    [("get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)", False), ("seq_lens", True)],
    ids=["the decorator localizes", "the decorator hands them on"],
)
def test_a_decorated_method_is_what_its_decorator_returns(tmp_path: Path, share: str, flagged: bool) -> None:
    """Set 23's `DecoratedLaunchDecodeBackend.forward_decode`: it hands the whole lengths to a launch helper whose
    decorator gives the helper this rank's share before the kernel sees them."""
    found = check_fork_beside_sglang(tmp_path, {"decorated.py": textwrap.dedent(DECORATED).replace("SHARE", share)})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else []), found.findings


REFUSING_EXTEND = """
import flashinfer
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel


class DraftExtendBackend(TRTLLMMLABackend):
    def draft_extend(self, q, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled:
            REFUSAL
        if not forward_batch.forward_mode.is_draft_extend_v2() or bs == 0:
            return None
        n = q.shape[0] // bs
        md = self.forward_decode_metadata
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q.view(bs, n, layer.tp_q_head_num, layer.head_dim), kv_cache=layer.kv,
            workspace_buffer=self.workspace_buffer, qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices, seq_lens=md.seq_lens_k, max_seq_len=md.max_seq_len_k + n,
        )
"""


@pytest.mark.parametrize(
    ("refusal", "flagged"),
    [('raise NotImplementedError("draft extend under DCP needs the global bound")', False), ("pass", True)],
    ids=["refused under DCP", "not refused"],
)
def test_a_mode_refused_under_dcp_is_not_the_mode_asked_again(tmp_path: Path, refusal: str, flagged: bool) -> None:
    """Set 23's `DraftExtendDCPBackendRefusing.forward_extend`: past its refusal of a draft extend under DCP, the
    batch is not a draft extend, so its own draft-extend launch (a query of several tokens per request with no
    global bound) is not reached under DCP."""
    found = check_fork_beside_sglang(
        tmp_path, {"extend.py": textwrap.dedent(REFUSING_EXTEND).replace("REFUSAL", refusal)}
    )
    assert [f.code for f in found.findings] == (["SG203"] if flagged else []), found.findings

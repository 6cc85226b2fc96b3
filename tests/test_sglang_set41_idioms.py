"""Idioms blind SGLang set 41 (`tests/corpus/blind_sglang_r41`, a fork of the MLA backends in a functional style)
showed the evaluation misjudging, each checked beside SGLang 0.5.23's real source. Each flagged case is its twin's
bug, and each clean one was a false positive on f23fc23."""

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

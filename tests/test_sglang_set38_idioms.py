"""What blind SGLang set 38 (issue 29, written to be the twenty-eighth session's last measure) showed SG106 and SG203
getting wrong, written as that set's forks are, each checked beside SGLang 0.5.23's real tree: a constructor that
refuses the setting through a helper of the fork's own package (`refuse_dcp("component")`, in a config module)
refuses it as one that raises itself does; a framework's constructor it calls is still not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

CONFIG = """
import logging

from sglang.srt.runtime_context import get_parallel

logger = logging.getLogger(__name__)


def dp_attention_active(server_args) -> bool:
    if server_args is not None and getattr(server_args, "enable_dp_attention", False):
        return True
    return bool(get_parallel().attn_dp_enabled)


def refuse_dp_attention(server_args, component: str) -> None:
    if dp_attention_active(server_args):
        raise ValueError(f"{component} does not support --enable-dp-attention")


def warn_dp_attention(server_args, component: str) -> None:
    if dp_attention_active(server_args):
        logger.warning("%s with DP attention is experimental", component)


def refuse_dcp(component: str) -> None:
    if get_parallel().dcp_enabled:
        raise NotImplementedError(f"{component} has no decode-context-parallel support")


def warn_dcp(component: str) -> None:
    if get_parallel().dcp_enabled:
        logger.warning("%s under DCP is experimental", component)
"""

WORKER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from fork.config import refuse_dp_attention, warn_dp_attention


class VendorDraftWorker(EagleDraftWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        GUARD(server_args, "VendorDraftWorker")
        super().__init__(server_args, gpu_id, nccl_port, target_worker)

    def draft_extend_for_prefill(self, forward_batch: ForwardBatch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("guard", "flagged"), [("refuse_dp_attention", False), ("warn_dp_attention", True)])
def test_sg106_a_constructor_refusing_through_its_own_helper(tmp_path: Path, guard: str, flagged: bool) -> None:
    """Set 38's `KestrelStrictDraftWorker._draft_extend_for_prefill` (a false positive before) and its twin whose
    constructor only warns."""
    found = check_fork_beside_sglang(tmp_path, {"config.py": CONFIG, "worker.py": WORKER.replace("GUARD", guard)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "VendorDraftWorker.draft_extend_for_prefill")] if flagged else []
    )


BACKEND = """
import flashinfer
import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

from fork.config import refuse_dcp, warn_dcp


class VendorMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        GUARD("vendor_trtllm_mla")
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    def decode_launch(self, query, kv_cache, layer, forward_batch):
        bs = forward_batch.batch_size
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=self.forward_decode_metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=self.forward_decode_metadata.max_seq_len_k,
            bmm1_scale=layer.scaling,
            return_lse=get_parallel().dcp_enabled,
        )
"""


@pytest.mark.parametrize(("guard", "flagged"), [("refuse_dcp", False), ("warn_dcp", True)])
def test_sg203_a_constructor_refusing_through_its_own_helper(tmp_path: Path, guard: str, flagged: bool) -> None:
    """Set 38's `KestrelNoDCPMLABackend._decode_launch` (a false positive before) and its twin whose constructor
    only logs under DCP, which then launches with the whole lengths."""
    found = check_fork_beside_sglang(tmp_path, {"config.py": CONFIG, "backend.py": BACKEND.replace("GUARD", guard)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG203", "VendorMLABackend.decode_launch")] if flagged else []
    )

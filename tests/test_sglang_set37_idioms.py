"""What blind SGLang sets 36 and 37 (issue 29) showed SG106 and SG203 getting wrong, written as those sets' forks
are, each checked beside SGLang 0.5.23's real tree:
- SG203: a fork's override that hands the batch on to the framework's own method (`super().init_forward_metadata`)
  is not blamed for what that method launches with lengths it reads itself (SGLang's FlashMLA finding is that
  method's own, made where SGLang is checked);
- SG203: lengths copied into a static buffer (`self.graph_lens[:bs].copy_(lens)`) are what the buffer holds when
  it is read again, and metadata built with the whole lengths as a keyword (`Metadata(seq_lens_k=lens)`,
  `dataclasses.replace(old, seq_lens_k=lens)`) and handed out keeps them there;
- SG106: a policy record kept by the constructor (`self.policy = DraftPlanPolicy(replan_equivalent=True)`, a
  dataclass with a method that only reads its fields) is a setting whose value the mark gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

DELEGATING = """
import torch

from sglang.kernels.ops.attention.flash_mla_interface import get_mla_metadata
from sglang.srt.layers.attention.flashmla_backend import FlashMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class DecodeOnlyDcpFlashMLA(FlashMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        p = get_parallel()
        lens = forward_batch.seq_lens.to(torch.int32)
        if p.dcp_enabled:
            lens = LOCAL
        self.mla_metadata, self.num_splits = get_mla_metadata(lens, self.num_q_heads, 1)
"""


@pytest.mark.parametrize(
    ("local", "flagged"), [("get_dcp_lens(lens, p.dcp_size, p.dcp_rank)", False), ("lens + 0", True)]
)
def test_an_override_is_not_blamed_for_the_framework_method_it_delegates_to(
    tmp_path: Path, local: str, flagged: bool
) -> None:
    """Sets 36 and 37's `init_forward_metadata` overrides of FlashMLABackend (decode their own, the rest handed to
    SGLang's method, whose DCP finding is its own), and a twin whose own decode plan is wrong."""
    found = check_fork_beside_sglang(tmp_path, {"backend.py": DELEGATING.replace("LOCAL", local)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG203", "DecodeOnlyDcpFlashMLA.init_forward_metadata")] if flagged else []
    )


STATIC = """
import torch

from sglang.kernels.ops.attention.flash_mla_interface import flash_mla_with_kvcache
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


class StaticLensBackend:
    def __init__(self, max_bs: int):
        self.graph_lens = torch.ones(max_bs, dtype=torch.int32)

    def replay_decode(self, q, layer, forward_batch, block_table):
        p = get_parallel()
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens[:bs]
        if p.dcp_enabled:
            lens = LENS
        self.graph_lens[:bs].copy_(lens)
        return flash_mla_with_kvcache(
            q=q.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            k_cache=self.k_cache,
            block_table=block_table,
            cache_seqlens=self.graph_lens[:bs],
            head_dim_v=self.kv_lora_rank,
            tile_scheduler_metadata=self.mla_metadata,
            num_splits=self.num_splits,
            softmax_scale=layer.scaling,
            causal=True,
        )
"""


@pytest.mark.parametrize(("lens", "flagged"), [("get_dcp_lens(lens, p.dcp_size, p.dcp_rank)", False), ("lens", True)])
def test_lengths_copied_into_a_static_buffer_are_what_it_holds(tmp_path: Path, lens: str, flagged: bool) -> None:
    """Set 37's `StaticLensFlashMLABackend._refresh_decode_graph_lens`, its lengths from the batch: the buffer the
    captured launch reads holds what was copied into its rows."""
    found = check_fork_beside_sglang(tmp_path, {"backend.py": STATIC.replace("LENS", lens)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG203", "StaticLensBackend.replay_decode")] if flagged else []
    )


BUILT = """
import dataclasses

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def build(forward_batch):
    p = get_parallel()
    lens = forward_batch.seq_lens.to(torch.int32)
    kernel_lens = get_dcp_lens(lens, p.dcp_size, p.dcp_rank) if p.dcp_enabled else lens
    metadata = BUILD
    forward_batch.decode_trtllm_mla_metadata = metadata
    return metadata
"""


@pytest.mark.parametrize(
    ("build", "flagged"),
    [
        ("TRTLLMMLADecodeMetadata(seq_lens_k=lens)", True),
        ("TRTLLMMLADecodeMetadata(seq_lens_k=kernel_lens, global_seq_lens_k=lens)", False),
        ("dataclasses.replace(forward_batch.decode_trtllm_mla_metadata, seq_lens_k=lens)", True),
        ("dataclasses.replace(forward_batch.decode_trtllm_mla_metadata, seq_lens_k=kernel_lens)", False),
    ],
)
def test_metadata_built_with_the_whole_lengths_keeps_them(tmp_path: Path, build: str, flagged: bool) -> None:
    """Set 37's `DraftExtendMetadataBuilder.build` and set 36's `refresh_metadata_after_pad`: the decode metadata
    built (or copied with `replace`) holding the whole lengths as `seq_lens_k` under DCP, handed out."""
    found = check_fork_beside_sglang(tmp_path, {"builder.py": BUILT.replace("BUILD", build)})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "build")] if flagged else [])


POLICY = """
from dataclasses import dataclass
from typing import Any, Dict


@dataclass
class DraftPlanPolicy:
    replan_equivalent: bool = False

    def mark_kwargs(self) -> Dict[str, Any]:
        return {"replan_equivalent": self.replan_equivalent}
"""

STRATEGY = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from fork.policy import DraftPlanPolicy


class DraftExtendStrategy:
    def __init__(self, draft_runner):
        self.draft_runner = draft_runner
        self.policy = DraftPlanPolicy(POLICY)

    def execute(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(**self.policy.mark_kwargs())
        return self.draft_runner.forward(forward_batch).logits_output
"""


@pytest.mark.parametrize(("policy", "flagged"), [("replan_equivalent=True", False), ("", True)])
def test_a_policy_record_kept_by_the_constructor_is_a_setting(tmp_path: Path, policy: str, flagged: bool) -> None:
    """Set 37's `TunedPolicyDraftExtendStrategy.execute` (a false positive before) and its twin with the default."""
    modules = {"policy.py": POLICY, "strategy.py": STRATEGY.replace("POLICY", policy)}
    found = check_fork_beside_sglang(tmp_path, modules)
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "DraftExtendStrategy.execute")] if flagged else []
    )


SHARE = """
import torch

from sglang.kernels.ops.attention.flash_mla_interface import flash_mla_with_kvcache
from sglang.srt.runtime_context import get_parallel


def decode(q, layer, forward_batch, block_table, k_cache, mla_metadata, num_splits, kv_lora_rank):
    p = get_parallel()
    if not p.dcp_enabled:
        raise NotImplementedError("this fork's decode path is DCP-only")
    bs = forward_batch.batch_size
    lens = forward_batch.seq_lens[:bs]
    local = (SHARE).to(torch.int32)
    return flash_mla_with_kvcache(
        q=q.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        k_cache=k_cache,
        block_table=block_table,
        cache_seqlens=local,
        head_dim_v=kv_lora_rank,
        tile_scheduler_metadata=mla_metadata,
        num_splits=num_splits,
        softmax_scale=layer.scaling,
        causal=True,
    )
"""


@pytest.mark.parametrize(
    ("share", "flagged"),
    [
        ("lens // p.dcp_size + (p.dcp_rank < lens % p.dcp_size)", False),
        ('torch.div(lens - p.dcp_rank - 1, p.dcp_size, rounding_mode="floor") + 1', False),
        ('torch.div(lens + p.dcp_size - 1, p.dcp_size, rounding_mode="floor")', True),
        ("(lens + p.dcp_size - 1) // p.dcp_size", True),
    ],
)
def test_a_share_is_this_ranks_only_where_its_index_enters(tmp_path: Path, share: str, flagged: bool) -> None:
    """Set 28's `CeilDivDecodeBackend.forward_decode` (a ceil division, the same on every rank, overstating the
    share of the ranks past the remainder) against the two exact forms, in which this rank's index enters."""
    found = check_fork_beside_sglang(tmp_path, {"decode.py": SHARE.replace("SHARE", share)})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "decode")] if flagged else [])

"""Idioms blind SGLang set 40 (`tests/corpus/blind_sglang_r40`, a fork built from registries, frozen settings and
components its constructors build) showed the evaluation losing, each checked beside SGLang 0.5.23's real source.
Each flagged case was missed on 9ae7996 and each clean one is its twin done right (two were false positives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

SETTINGS = """
from dataclasses import dataclass

from sglang.srt.runtime_context import get_parallel


def _arg(server_args, name, default):
    value = getattr(server_args, name, None)
    return default if value is None else value


@dataclass(frozen=True)
class DcpSettings:
    size: int
    rank: int

    @classmethod
    def from_server_args(cls, server_args) -> "DcpSettings":
        size = int(_arg(server_args, "dcp_size", 1))
        return cls(size=size, rank=get_parallel().dcp_rank if size > 1 else 0)

    @property
    def enabled(self) -> bool:
        return self.size > 1


@dataclass(frozen=True)
class LaunchSettings:
    dcp: DcpSettings

    @classmethod
    def from_server_args(cls, server_args) -> "LaunchSettings":
        return cls(dcp=DcpSettings.from_server_args(server_args))
"""

LAUNCHER = """
import functools

import torch

import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens

from fork.settings import LaunchSettings


def mla_decode(query, kv_cache, workspace, block_tables, seq_lens, max_seq_len, **kwargs):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv_cache, workspace_buffer=workspace, block_tables=block_tables,
        seq_lens=seq_lens, max_seq_len=max_seq_len, **kwargs,
    )


class Launcher:
    def __init__(self, settings: LaunchSettings, workspace):
        self.dcp = settings.dcp
        self.workspace = workspace
        self._dcp_launch = functools.partial(mla_decode, enable_dcp=True, return_lse=True)

    def decode(self, query, kv_cache, forward_batch, table):
        bs = forward_batch.batch_size
        whole = forward_batch.seq_lens[:bs].to(torch.int32)
        local = get_dcp_lens(whole, self.dcp.size, self.dcp.rank)
        BODY
"""


@pytest.mark.parametrize(
    ("body", "flagged"),
    [
        # the whole lengths only where the settings say DCP is off (a false positive before: the settings object,
        # kept from the constructor's parameter, was unknown, and so was `enabled`)
        (
            "if not self.dcp.enabled:\n"
            "            return mla_decode(query, kv_cache, self.workspace, table, whole, 4)\n"
            "        return mla_decode(\n"
            "            query, kv_cache, self.workspace, table, local, 4,\n"
            "            causal_seqlens_kv_global=whole, enable_dcp=True,\n"
            "        )",
            False,
        ),
        ("return mla_decode(query, kv_cache, self.workspace, table, whole, 4, enable_dcp=self.dcp.enabled)", True),
        # through a partial of the fork's own launching helper, kept by the constructor
        (
            "return self._dcp_launch(query, kv_cache, self.workspace, table, whole, 4, causal_seqlens_kv_global=whole)",
            True,
        ),
        (
            "return self._dcp_launch(query, kv_cache, self.workspace, table, local, 4, causal_seqlens_kv_global=whole)",
            False,
        ),
        # the global causal bound given this rank's share
        (
            "return self._dcp_launch(query, kv_cache, self.workspace, table, local, 4, causal_seqlens_kv_global=local)",
            True,
        ),
    ],
)
def test_sg203_frozen_settings_built_by_their_factory_and_a_partial_of_a_launching_helper(
    tmp_path: Path, body: str, flagged: bool
) -> None:
    """Set 40's `DcpMlaLauncher`: a frozen settings record its class builds from the server's arguments is what its
    factory read (its DCP size, and so `enabled`), and the launch is reached through a `functools.partial` of the
    fork's own helper; `verify_bound` hands the bound this rank's share."""
    modules = {"settings.py": SETTINGS, "launcher.py": LAUNCHER.replace("BODY", body)}
    found = check_fork_beside_sglang(tmp_path, modules)
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "Launcher.decode")] if flagged else [])


COMPONENTS = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class MlpSyncPadder:
    def __init__(self, model_runner):
        self.model_runner = model_runner

    def pad(self, forward_batch: ForwardBatch) -> bool:
        if forward_batch.global_num_tokens_cpu is None:
            return False
        forward_batch.prepare_mlp_sync_batch(self.model_runner)
        return True


class EagerModelRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner

    def run(self, forward_batch: ForwardBatch):
        if forward_batch.needs_forward_metadata_init():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.model_runner.model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch)


class Planner:
    def __init__(self, draft_runner):
        self.draft_runner = draft_runner
        self.padder = MlpSyncPadder(draft_runner)
        self.eager = EagerModelRunner(draft_runner)

    def decode(self, forward_batch: ForwardBatch):
        forward_batch.forward_mode = ForwardMode.DECODE
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(MARK)
        self.padder.pad(forward_batch)
        return self.eager.run(forward_batch)
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_sg106_components_the_constructor_builds_run_their_methods(tmp_path: Path, mark: str, flagged: bool) -> None:
    """Set 40's `ScopedDraftPlanner.decode_via_property`: the padder and the eager runner are objects of the fork's
    own classes its constructor builds; their methods (pad for DP attention, then a model forward that plans only
    where the batch asks) run where the planner calls them."""
    found = check_fork_beside_sglang(tmp_path, {"components.py": COMPONENTS.replace("MARK", mark)})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG106", "Planner.decode")] if flagged else [])


BACKENDS = """
import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend


class ForkBackend(TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        self._current_seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]

    def forward_decode_current(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._current_seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )


class GuardedForkBackend(ForkBackend):
    def _run_decode_kernel(self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer, *, causal_seqs=None,
                           cp_world=1, cp_rank=0, return_lse=False):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if self.dcp_size > 1 and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError("no global causal bound for a multi-token query under DCP")
        return super()._run_decode_kernel(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
            causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank, return_lse=return_lse,
        )
"""


def test_sg203_an_override_handed_a_reported_callers_whole_lengths_is_not_reported_again(tmp_path: Path) -> None:
    """Set 40's `DcpTRTLLMMLAGuardedBackend._run_decode_kernel` (a false positive before): the whole lengths its
    base class's method reads and hands it are that method's finding, which is reported; the override hands them
    on unchanged."""
    found = check_fork_beside_sglang(tmp_path, {"backends.py": BACKENDS})
    assert [(f.code, f.symbol) for f in found.findings] == [("SG203", "ForkBackend.forward_decode_current")]


TWICE = """
import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel


def launch(query, kv_cache, block_tables, forward_batch):
    parallel = get_parallel()
    whole = forward_batch.seq_lens[: forward_batch.batch_size]
    lens = get_dcp_lens(whole, parallel.dcp_size, parallel.dcp_rank)
    if parallel.dcp_enabled:
        lens = get_dcp_lens(AGAIN, parallel.dcp_size, parallel.dcp_rank)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv_cache, block_tables=block_tables, seq_lens=lens, max_seq_len=4096,
        causal_seqlens_kv_global=whole, enable_dcp=True, return_lse=True, backend="cute-dsl",
    )
"""


@pytest.mark.parametrize(("again", "flagged"), [("lens", True), ("whole", False)])
def test_sg203_lengths_localized_twice(tmp_path: Path, again: str, flagged: bool) -> None:
    """Set 40's `PrelocalizedDcpUpdater.call_begin_forward` (`update_local_kv_lens_for_dcp`, then
    `plan_dcp_decode_metadata`, which localizes the same lengths again): a share of this rank's share is no rank's
    length. Its twin localizes the whole lengths once."""
    found = check_fork_beside_sglang(tmp_path, {"twice.py": TWICE.replace("AGAIN", again)})
    assert [(f.code, f.symbol) for f in found.findings] == ([("SG203", "launch")] if flagged else [])
    if flagged:
        assert "localized twice" in found.findings[0].message

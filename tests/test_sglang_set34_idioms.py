"""What blind SGLang sets 33 and 34 (issue 29) showed SG106 and SG203 getting wrong, written as those sets' forks
are, each checked beside SGLang 0.5.23's real tree:

- a template method whose hook, overridden by a subclass, plans and marks the batch on one path only and hands it
  back beside the flag that says which (the tests of a callee's callee choose the path);
- a backend of the fork's own class kept by a launcher from its constructor's annotated parameter;
- FlashMLA's launch and the schedule it reads under DCP, known by their signatures in the pack (`[mla] launches`),
  its decode's `-1` tokens per request read as one (`[dcp] decode_methods`), its sparse form not judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

HOOK = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class DraftWorker:
    def _prepare(self, forward_batch: ForwardBatch):
        return forward_batch, self.cuda_graph_runner.can_run(forward_batch)

    def draft_via_hook(self, forward_batch: ForwardBatch):
        forward_batch, can_run_graph = self._prepare(forward_batch)
        if can_run_graph:
            return self.cuda_graph_runner.replay(forward_batch)
        return self.draft_model_runner.forward(forward_batch)


class PrePlanningDraftWorker(DraftWorker):
    def draft(self, forward_batch: ForwardBatch):
        return self.draft_via_hook(forward_batch)

    def _prepare(self, forward_batch: ForwardBatch):
        forward_batch, can_run_graph = super()._prepare(forward_batch)
        if not can_run_graph and not forward_batch.forward_mode.is_idle():
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(MARK)
        return forward_batch, can_run_graph
"""


@pytest.mark.parametrize(("mark", "flagged"), [("", True), ("replan_equivalent=True", False)])
def test_a_hook_that_plans_on_one_path_is_read_path_by_path(tmp_path: Path, mark: str, flagged: bool) -> None:
    """Set 34's `EagerPlanningNextNDraftWorker.draft` (a finding: the eager path plans and marks, then the forward
    pads) and `ReplannableNextNDraftWorker.draft` (clean: marked so that a padded batch is planned again); both
    were listed as not decided, the hook's paths joined before the flag was tested."""
    found = check_fork_beside_sglang(tmp_path, {"worker.py": HOOK.replace("MARK", mark)})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "PrePlanningDraftWorker.draft")] if flagged else []
    ), found.findings
    assert not found.undecided, found.undecided


FLASHMLA = """
import torch
from sglang.kernels.ops.attention.flash_mla_interface import flash_mla_with_kvcache, get_mla_metadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel


class DcpFlashMLABackend:
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        parallel = get_parallel()
        lens = forward_batch.seq_lens.to(torch.int32)
        if parallel.dcp_enabled:
            lens = LENS
        self.lens = lens
        self.schedule, self.splits = get_mla_metadata(lens, self.num_q_heads, 1)

    def forward_decode(self, q, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        o, lse = flash_mla_with_kvcache(
            q.view(bs, -1, layer.tp_q_head_num, layer.head_dim), self.k_cache, self.block_table, self.lens,
            layer.v_head_dim, self.schedule, self.splits,
        )
        return (o, lse) if get_parallel().dcp_enabled else o

    def forward_sparse(self, q, layer, forward_batch: ForwardBatch, topk_indices):
        if get_parallel().dcp_enabled:
            return flash_mla_with_kvcache(
                q=q, k_cache=self.k_cache, block_table=None, cache_seqlens=forward_batch.seq_lens,
                head_dim_v=layer.v_head_dim, tile_scheduler_metadata=self.schedule, indices=topk_indices,
            )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [
        ("get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank)", []),
        ("lens", ["DcpFlashMLABackend.forward_decode", "DcpFlashMLABackend.init_forward_metadata"]),
    ],
)
def test_flashmla_under_dcp_takes_this_ranks_lengths(tmp_path: Path, lens: str, flagged: list[str]) -> None:
    """Set 33's FlashMLA ports (`SharedScheduleFlashMLABackend.init_forward_metadata`, `DirectLensFlashMLABackend.
    forward_decode`) and SGLang's own FlashMLABackend (sgl-project/sglang#39970): the schedule and the launch get
    this rank's share or are findings; a decode's `q.view(bs, -1, ...)` is one token per request, and the sparse
    form (top-k `indices`) is not judged."""
    found = check_fork_beside_sglang(tmp_path, {"flashmla.py": FLASHMLA.replace("LENS", lens)})
    assert sorted(f.symbol for f in found.findings if f.code == "SG203") == flagged, found.findings


VERIFY = """
from sglang.kernels.ops.attention.flash_mla_interface import flash_mla_with_kvcache
from sglang.srt.runtime_context import get_parallel


class DcpFlashMLAVerify:
    def forward_extend(self, q, layer, forward_batch):
        bs = forward_batch.batch_size
        REFUSAL
        return flash_mla_with_kvcache(
            q=q.view(bs, self.num_draft_tokens, layer.tp_q_head_num, layer.head_dim), k_cache=self.k_cache,
            block_table=self.block_table, cache_seqlens=self.local_lens, head_dim_v=layer.v_head_dim,
            tile_scheduler_metadata=self.schedule, num_splits=self.splits, causal=True,
        )
"""


@pytest.mark.parametrize(
    ("refusal", "flagged"),
    [("assert get_parallel().attn_dcp_size == 1", False), ("get_parallel().dcp_enabled", True)],
)
def test_a_flashmla_verify_under_dcp_is_refused_or_a_finding(tmp_path: Path, refusal: str, flagged: bool) -> None:
    """Set 33's `ShardedFlashMLABackend.forward_extend`: FlashMLA takes no global causal bound, so a query of
    several tokens per request under DCP must be refused."""
    found = check_fork_beside_sglang(tmp_path, {"verify.py": VERIFY.replace("REFUSAL", refusal)})
    messages = [f.message for f in found.findings if f.code == "SG203"]
    assert len(messages) == flagged, found.findings
    assert all("no global causal bound (`flash_mla_with_kvcache` takes none)" in m for m in messages)


HELD = """
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.runtime_context import get_parallel


class VendorDcpBackend(CuteDslMLABackend):
    pass


class VerifyLauncher:
    def __init__(self, backend: HOLDER):
        self.backend = backend

    def run_target_verify(self, q, layer, forward_batch):
        be = self.backend
        assert get_parallel().dcp_enabled
        bs, n = forward_batch.batch_size, forward_batch.spec_info.draft_token_num
        global_lens = (forward_batch.seq_lens[:bs] + n).to(torch.int32)
        local_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(local_lens)
        return be._run_decode_kernel(
            query=q.view(bs, n, layer.tp_q_head_num, layer.head_dim), kv_cache=be._kv(layer),
            block_tables=be.block_kv_indices, seq_lens=LENS, max_seq_len=be.max_seq_len, layer=layer,
            causal_seqs=global_lens, cp_world=2, cp_rank=0, return_lse=True,
        )
"""


@pytest.mark.parametrize(
    ("holder", "lens", "flagged"),
    [("VendorDcpBackend", "global_lens", True), ("VendorDcpBackend", "local_lens", False)],
)
def test_a_backend_of_the_trees_own_class_kept_by_a_launcher_is_followed(
    tmp_path: Path, holder: str, lens: str, flagged: bool
) -> None:
    """Set 34's `SpecDcpLauncher.run_target_verify`: the launcher keeps a backend of its own package's class from
    its constructor's annotated parameter; the backend's `_run_decode_kernel` (SGLang's) launches with what the
    launcher hands it: the whole lengths are a finding, the copy made this rank's share is not."""
    text = "import torch\n" + HELD.replace("HOLDER", holder).replace("LENS", lens)
    found = check_fork_beside_sglang(tmp_path, {"launcher.py": text})
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG203", "VerifyLauncher.run_target_verify")] if flagged else []
    ), found.findings

"""What blind SGLang set 20 showed (issue 29), each case written as that set's backends are, and its finding (or its
absence) checked:
- SG203: a field read with the builtin `getattr(batch, "seq_lens_cpu", None)` is the same read as
  `batch.seq_lens_cpu`; an element of a container the instance holds, read by a key the code names
  (`self.decode_cuda_graph_metadata[bs]`), is one object wherever the function reads it so, so the lengths copied
  into its `seq_lens_k` on a CUDA-graph replay are what the replayed launch gets; host lengths kept in the
  instance's replay keywords reach the FlashInfer MLA updater's replay plan (`[mla] planning_calls`);
- SG106: the eager runner's `execute`, which SGLang calls once it has padded the batch, pads nothing itself;
- SG203 (twenty-second session): a ragged query is as wide as its launch's `max_q_len=` says, and a width the
  function compares before it launches is not decided (a comparison is not narrowed), never a finding."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source
from tests.conftest import check_fork_beside_sglang

HOST_LENS = """
import flashinfer
from sglang.srt.runtime_context import get_parallel

class HostLensBackend:
    def forward_decode(self, query, kv_cache, metadata, forward_batch):
        host_lens = getattr(forward_batch, FIELD, None)
        if not get_parallel().dcp_enabled or host_lens is None:
            return None
        kv_lens = host_lens[: forward_batch.batch_size].to(query.device, non_blocking=True)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices, seq_lens=kv_lens,
            max_seq_len=4096, return_lse=True,
        )
"""


@pytest.mark.parametrize(
    ("field", "flagged"),
    [('"seq_lens_cpu"', True), ('"dcp_local_seq_lens_cpu"', False)],
    ids=["the batch's whole lengths", "another field"],
)
def test_a_field_read_through_getattr_is_that_field(field: str, flagged: bool) -> None:
    """Set 20's `HostLensCuteDslMLABackend.forward_decode` reads the batch's host lengths with `getattr(..., None)`
    and launches them under DCP."""
    found = check_source(textwrap.dedent(HOST_LENS).replace("FIELD", field))
    assert [f.code for f in found] == (["SG203"] if flagged else []), found


FAST_REPLAY = """
import torch
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

class FastReplayTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner, *args, fast_replay=True, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._fast_replay = fast_replay

    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, forward_mode):
        if self._fast_replay and forward_mode.is_decode_or_idle() GUARD:
            metadata = self.decode_cuda_graph_metadata[bs]
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            return
        return super()._apply_cuda_graph_metadata(plan, bs, req_pool_indices, seq_lens, forward_mode)
"""


@pytest.mark.parametrize(
    ("guard", "flagged"),
    [("", True), ("and not get_parallel().dcp_enabled", False)],
    ids=["under DCP too", "DCP left to SGLang"],
)
def test_lengths_copied_into_a_captured_metadata_are_what_the_replay_launches(
    tmp_path: Path, guard: str, flagged: bool
) -> None:
    """Set 20's `FastReplayTRTLLMMLABackend`: its replay shortcut copies the lengths SGLang hands it (the batch's
    whole ones) into the captured metadata's `seq_lens_k`, which the replayed decode launches with, and skips
    SGLang's DCP step that stores this rank's share there."""
    found = check_fork_beside_sglang(
        tmp_path, {"replay.py": textwrap.dedent(FAST_REPLAY).replace(" GUARD", f" {guard}")}
    )
    expected = [("FastReplayTRTLLMMLABackend._apply_cuda_graph_metadata", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


EAGER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner.eager_runner import EagerRunner

class PrePlanningEagerRunner(EagerRunner):
    def execute(self, forward_batch: ForwardBatch, pp_proxy_tensors=None, **kwargs):
        if forward_batch.forward_mode.is_decode() and forward_batch.needs_forward_metadata_init():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        PAD
        return super().execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors, **kwargs)
"""


@pytest.mark.parametrize(
    ("pad", "flagged"),
    [("pass", False), ("self.model_runner._prepare_eager_forward_batch(forward_batch)", True)],
    ids=["planned once padded", "padded again after the plan"],
)
def test_the_eager_runner_runs_the_batch_it_is_handed_as_it_is(tmp_path: Path, pad: str, flagged: bool) -> None:
    """Set 20's `PrePlanningEagerRunner.execute`: SGLang calls the eager runner's `execute` after `_forward_raw`
    padded the batch, and `execute` pads nothing, so a plan made inside it is for the batch it runs; padding the
    batch after that plan is the bug."""
    found = check_fork_beside_sglang(tmp_path, {"eager.py": textwrap.dedent(EAGER).replace("PAD", pad)})
    expected = [("PrePlanningEagerRunner.execute", "SG106")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings


KWARGS_REPLAY = """
import torch
from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAAttnBackend
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp

class KwargsReplayFlashInferMLABackend(FlashInferMLAAttnBackend):
    def _apply_cuda_graph_metadata(
        self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu,
        in_capture=False,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode, spec_info, seq_lens_cpu,
                in_capture=in_capture,
            )
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        LOCALIZE
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            qo_indptr_cpu=self.cuda_graph_qo_indptr_cpu[: bs + 1],
            kv_indptr_cpu=self.cuda_graph_kv_indptr_cpu[: bs + 1],
            kv_len_arr_cpu=kv_len_arr_cpu,
        )
        self.indices_updater_decode.update(
            seq_lens[:bs], seq_lens_sum, decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True, spec_info=spec_info, req_pool_indices=req_pool_indices[:bs], plan=plan,
            **self.fast_decode_kwargs,
        )
"""


@pytest.mark.parametrize(
    ("localize", "flagged"),
    [("pass", True), ("update_local_kv_lens_for_dcp(kv_len_arr_cpu)", False)],
    ids=["whole host lengths", "this rank's share"],
)
def test_host_lengths_kept_in_the_replay_keywords_are_what_the_updater_plans(
    tmp_path: Path, localize: str, flagged: bool
) -> None:
    """Sets 19 and 20's FlashInfer MLA replays: the host lengths stored in `self.fast_decode_kwargs` (which SGLang's
    `init_cuda_graph_state` fills with keywords) reach SGLang's decode updater's `update(**...)`, whose replay plans
    them as handed (the pack's `[mla] planning_calls`)."""
    text = textwrap.dedent(KWARGS_REPLAY).replace("LOCALIZE", localize)
    found = check_fork_beside_sglang(tmp_path, {"replay.py": text})
    expected = [("KwargsReplayFlashInferMLABackend._apply_cuda_graph_metadata", "SG203")] if flagged else []
    assert [(f.symbol, f.code) for f in found.findings] == expected, found.findings
    if flagged:
        assert "hands `indices_updater_decode.update`" in found.findings[0].message
        assert "as `kv_len_arr_cpu`" in found.findings[0].message


RAGGED = """
import flashinfer
from sglang.srt.runtime_context import get_parallel

def launch_ragged_verify(backend, query, kv_cache, metadata, layer, *, cu_seqlens_q, max_q_len):
    bs = cu_seqlens_q.shape[0] - 1
    dcp_enabled = get_parallel().dcp_enabled
    GUARD
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv_cache, workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim, kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim, block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k[:bs], max_seq_len=metadata.max_seq_len_k, cum_seq_lens_q=cu_seqlens_q,
        max_q_len=WIDTH, return_lse=dcp_enabled,
    )
"""


@pytest.mark.parametrize(
    ("guard", "width", "verdict"),
    [
        ("pass", "max_q_len", "flagged"),
        ("pass", "1", "clean"),
        (
            'if dcp_enabled and max_q_len > 1:\n        raise NotImplementedError("no bound")',
            "max_q_len",
            "not decided",
        ),
    ],
    ids=["ragged, several tokens", "ragged, one token each", "refused above one token"],
)
def test_a_ragged_query_is_as_wide_as_its_launch_says(tmp_path: Path, guard: str, width: str, verdict: str) -> None:
    """Set 20's `launch_ragged_verify_decode_checked`: a ragged query under DCP with no global bound, refused where
    its widest request has more than one token (a comparison the evaluation does not narrow: not decided, never a
    finding); handed `max_q_len=1`, it holds one token per request."""
    text = textwrap.dedent(RAGGED).replace("GUARD", guard).replace("WIDTH", width)
    found = check_fork_beside_sglang(tmp_path, {"ragged.py": text})
    assert [(f.symbol, f.code) for f in found.findings] == (
        [("launch_ragged_verify", "SG203")] if verdict == "flagged" else []
    ), found.findings
    compared = [u for u in found.undecided if "is compared in `max_q_len > 1`" in str(u)]
    assert bool(compared) == (verdict == "not decided"), found.undecided

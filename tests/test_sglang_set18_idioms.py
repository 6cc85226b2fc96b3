"""What blind SGLang sets 17 and 18 showed (issue 29), each case written as those sets' backends and workers are,
and its finding (or its absence) checked:
- SG203: a parameter the function localizes on one path only is the whole lengths on the others; a local buffer
  filled with `.copy_(lens)` holds those lengths; lengths divided by the number of DCP ranks are one rank's share;
  a backend narrowed by `isinstance` is an instance of that class, whose methods run;
- SG106: a setting a constructor stores as `flag and not server_args.enable_dp_attention` is false with DP on; a
  `Sequence[ForwardBatch]` parameter's batches are planned in one loop and run in another; the backend read from
  the forward context (a module global that `set_forward_context` sets) plans; a parameter annotated with a plain
  class of the tree is an instance of it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source, check_source_judged
from tests.conftest import check_fork_beside_sglang

HOST_CACHED = """
import torch
from sglang.srt.layers.dcp.layout import update_local_kv_lens_for_dcp
from sglang.srt.runtime_context import get_parallel

def plan_decode(wrapper, kv_indices, seq_lens_cpu, bs, kv_len_cache=None):
    if kv_len_cache is not None and kv_len_cache.shape[0] >= bs:
        kv_len_arr_cpu = kv_len_cache[:bs]
        CACHED
    else:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
    torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
    qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
    wrapper.plan(
        qo_indptr_cpu, kv_indptr_cpu, kv_indices, kv_len_arr_cpu, 16, 512, 64, 1, False, 1.0,
        torch.bfloat16, torch.bfloat16,
    )

def dcp_on():
    return get_parallel().dcp_enabled
"""


@pytest.mark.parametrize(
    ("cached", "flagged"),
    [
        ("kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])", True),
        ("kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])\n        update_local_kv_lens_for_dcp(kv_len_arr_cpu)", False),
        ("kv_len_arr_cpu = seq_lens_cpu[:bs]", True),
    ],
    ids=["copied, not localized", "copied and localized", "taken whole"],
)
def test_a_parameter_localized_on_one_path_only_is_whole_on_the_others(cached: str, flagged: bool) -> None:
    """Set 17's `plan_mla_decode_wrapper_host_cached`: nothing calls it, but it localizes `seq_lens_cpu` on one path
    (so they are the whole lengths), and its cached path fills a buffer with them (`.copy_`) and plans that."""
    found, judged = check_source_judged(textwrap.dedent(HOST_CACHED).replace("CACHED", cached))
    assert [f.code for f in found] == (["SG203"] if flagged else []), found
    if flagged:
        assert "on the path where `kv_len_cache is not None" in found[0].message
    assert not [j for j in judged if j.code == "SG203" and not j.decided], judged


INLINE_SHARE = """
import flashinfer
import torch
from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size

class InlineShareBackend:
    def forward_decode(self, query, kv_cache, metadata, forward_batch):
        world = get_dcp_world_size()
        if world <= 1:
            return None
        rank = get_dcp_rank()
        lens = forward_batch.seq_lens[: forward_batch.batch_size]
        local_lens = LOCAL
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices, seq_lens=local_lens,
            max_seq_len=4096, return_lse=True,
        )
"""


@pytest.mark.parametrize(
    ("local", "flagged"),
    [
        ("(lens // world + (rank < lens % world).to(lens.dtype)).to(torch.int32)", False),
        ("lens.to(torch.int32)", True),
    ],
    ids=["its share, worked out", "whole"],
)
def test_lengths_divided_by_the_number_of_ranks_are_one_ranks_share(local: str, flagged: bool) -> None:
    """Set 18's `InlineShareDecodeBackend.forward_decode` works out `len // world + (rank < len % world)` itself."""
    found = check_source(textwrap.dedent(INLINE_SHARE).replace("LOCAL", local))
    assert [f.code for f in found] == (["SG203"] if flagged else []), found


HYBRID = """
import torch
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

class ShortcutHybridBackend(HybridAttnBackend):
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        backend = self.decode_backend
        if not get_parallel().dcp_enabled or not isinstance(backend, TRTLLMMLABackend):
            return backend.forward_decode(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        bs = forward_batch.batch_size
        metadata = backend.forward_decode_metadata
        seq_lens = LENS
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim).unsqueeze(1)
        kv_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id).unsqueeze(1)
        return backend._run_decode_kernel(
            query, kv_cache, metadata.block_kv_indices, seq_lens, metadata.max_seq_len_k, layer, return_lse=True
        )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [
        ("forward_batch.seq_lens[:bs].to(torch.int32)", True),
        ("backend._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])", False),
    ],
    ids=["whole", "its share"],
)
def test_a_backend_narrowed_by_isinstance_runs_its_classs_methods(tmp_path: Path, lens: str, flagged: bool) -> None:
    """Sets 17 and 18's hybrid backends: the decode backend they hold is known by the `isinstance` test that guards
    the shortcut, and its `_run_decode_kernel` (SGLang's own) launches the lengths handed to it."""
    found = check_fork_beside_sglang(tmp_path, {"hybrid.py": textwrap.dedent(HYBRID).replace("LENS", lens)})
    assert [f.code for f in found.findings] == (["SG203"] if flagged else []), found.findings


GATED_WORKER = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

class GatedPreplanWorker(EagleDraftWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker, preplan_extend=True):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self._preplan_extend = SETTING

    def draft_extend_flagged(self, forward_batch: ForwardBatch):
        if self._preplan_extend and not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
"""
SPLIT = """
from typing import Sequence

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

def run_split_draft_extend(draft_runner: ModelRunner, micro_batches: Sequence[ForwardBatch]):
    backend = draft_runner.attn_backend
    for fb in micro_batches:
        if not fb.forward_mode.is_idle():
            backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready(MARK)
    return [draft_runner.forward(fb).logits_output for fb in micro_batches]
"""
IN_CONTEXT = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context, get_attn_backend
from sglang.srt.model_executor.model_runner import ModelRunner

def plan_in_context_then_forward(draft_runner: ModelRunner, backend, forward_batch: ForwardBatch):
    with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
        if not forward_batch.forward_mode.is_idle():
            get_attn_backend().init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(MARK)
        return draft_runner.forward(forward_batch).logits_output
"""

HANDLE = """
from typing import Any, Dict

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner

class DraftRunnerHandle:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner

    def run(self, forward_batch: ForwardBatch):
        return self.model_runner.forward(forward_batch).logits_output

def run_with_backend_table(handle: DraftRunnerHandle, backends: Dict[str, Any], forward_batch: ForwardBatch):
    backend = backends["draft_extend"]
    if backend is not None and not forward_batch.forward_mode.is_idle():
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(MARK)
    return handle.run(forward_batch)
"""


def test_sg106_reads_stored_settings_sequences_and_the_forward_context(tmp_path: Path) -> None:
    """Set 18's `DpGatedPreplanWorker` and `OverlapPreplanWorker` (the constructor's setting, false or true with DP
    attention on), `run_split_draft_extend` (a sequence of batches, each planned and marked, then run) and
    `plan_in_context_then_forward` (the backend of the forward context, `get_attn_backend()`, which reads a module
    global that `set_forward_context` sets: not the None it starts as) and `run_with_backend_table` (a parameter
    annotated with a plain class of the tree, whose method runs the forward), each beside its clean form."""
    modules = {
        "gated.py": GATED_WORKER.replace("SETTING", "preplan_extend and not server_args.enable_dp_attention"),
        "overlap.py": GATED_WORKER.replace("SETTING", "preplan_extend or server_args.enable_dp_attention"),
        "split.py": SPLIT.replace("MARK", ""),
        "split_replannable.py": SPLIT.replace("MARK", "replan_equivalent=True"),
        "in_context.py": IN_CONTEXT.replace("MARK", ""),
        "in_context_replannable.py": IN_CONTEXT.replace("MARK", "replan_equivalent=True"),
        "handle.py": HANDLE.replace("MARK", ""),
        "handle_replannable.py": HANDLE.replace("MARK", "replan_equivalent=True"),
    }
    found = check_fork_beside_sglang(tmp_path, {name: textwrap.dedent(text) for name, text in modules.items()})
    flagged = sorted((Path(f.path).name, f.code) for f in found.findings)
    expected = [("handle.py", "SG106"), ("in_context.py", "SG106"), ("overlap.py", "SG106"), ("split.py", "SG106")]
    assert flagged == expected, found.findings

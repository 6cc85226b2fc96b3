"""What blind SGLang set 39 (issue 29, the twenty-ninth session's blind measure) showed SG106 and SG203 getting
wrong, written as that set's forks are, each checked beside SGLang 0.5.23's real tree: a mixin's methods run on an
instance of the class that mixes it in, also where that class lives in another module of the fork and where what
the mixin uses of `self` is an attribute (a sibling mixin's cached property) rather than a method called."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import check_fork_beside_sglang

DRAFT_MIXINS = """
from functools import cached_property

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils.common import require_mlp_sync


class DpAttentionStateMixin:
    @cached_property
    def dp_attention_on(self) -> bool:
        return bool(self.server_args.enable_dp_attention) or require_mlp_sync()


class DraftExtendRunnerMixin:
    def run_extend_eager(self, forward_batch: ForwardBatch):
        if not forward_batch.forward_mode.is_idle():
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            if GUARD:
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
            else:
                forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output
"""

WORKER = """
from fork.mixins import DpAttentionStateMixin, DraftExtendRunnerMixin


class ForkDraftWorker(DpAttentionStateMixin, DraftExtendRunnerMixin):
    def __init__(self, server_args, target_worker, draft_runner):
        self.server_args = server_args
        self.target_worker = target_worker
        self.draft_runner = draft_runner

    def draft_extend_replanned(self, forward_batch):
        self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.draft_runner.forward(forward_batch)
"""


@pytest.mark.parametrize(("guard", "flagged"), [("self.dp_attention_on", False), ("False", True)])
def test_sg106_a_mixin_reads_a_sibling_mixins_property_through_the_class_that_mixes_both(
    tmp_path: Path, guard: str, flagged: bool
) -> None:
    """Set 39's `DraftExtendRunnerMixin._run_extend_eager_guarded` (a false positive before: `self.dp_attention_on`
    was unknown on the mixin alone) and its twin that marks a DP-padded batch as planned whatever the setting."""
    modules = {"mixins.py": DRAFT_MIXINS.replace("GUARD", guard), "worker.py": WORKER}
    found = check_fork_beside_sglang(tmp_path, modules)
    assert [(f.code, f.symbol) for f in found.findings] == (
        [("SG106", "DraftExtendRunnerMixin.run_extend_eager")] if flagged else []
    )


MLA_MIXINS = '''
"""DCP mixins of the fork's MLA backends: the launches their `_forward_decode_dcp` hooks share."""

from __future__ import annotations

import logging
from functools import cached_property

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available


if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class DcpSettingsMixin:
    @cached_property
    def dcp_size(self) -> int:
        return int(getattr(self.server_args, "dcp_size", 1) or 1)

    @cached_property
    def dcp_rank(self) -> int:
        return get_parallel().dcp_rank if self.dcp_size > 1 else 0

    def _local(self, seq_lens: torch.Tensor) -> torch.Tensor:
        if self.dcp_size <= 1:
            return seq_lens
        return get_dcp_lens(seq_lens, self.dcp_size, self.dcp_rank).to(torch.int32)

    def _local_max(self, max_seq_len: int) -> int:
        if self.dcp_size <= 1:
            return max_seq_len
        local = max_seq_len // self.dcp_size + int(
            self.dcp_rank < max_seq_len % self.dcp_size
        )
        return max(local, 1)


class DcpRefusalMixin:
    def _refuse_multi_token_dcp(self, q_len: int, what: str) -> None:
        if self.dcp_size > 1 and q_len > 1:
            raise NotImplementedError(
                f"{what}: the decode kernel takes no global causal bound, which "
                "DCP needs for q_len > 1; use cutedsl_mla for DCP speculative runs."
            )


class DcpDecodeKernelMixin:
    """trtllm-gen MLA decode launches shared by the fork's backends."""

    def _trtllm_gen_kwargs(self):
        return {"multi_ctas_kv_counter_buffer": self._multi_ctas_kv_counter_buffer}

    def _launch_decode_from_batch_local(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = self._local(forward_batch.seq_lens[:bs]).to(torch.int32)
        dcp_on = self.dcp_size > 1
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._local_max(metadata.max_seq_len_k),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_on,
            **self._trtllm_gen_kwargs(),
        )
        if not dcp_on:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def _launch_decode_from_batch(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        dcp_on = self.dcp_size > 1
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._local_max(metadata.max_seq_len_k),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_on,
            **self._trtllm_gen_kwargs(),
        )
        if not dcp_on:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, self._local(seq_lens), self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse
'''

BACKEND = """
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend

from fork.mixins import DcpDecodeKernelMixin, DcpRefusalMixin, DcpSettingsMixin


class ForkMLABackend(DcpSettingsMixin, DcpRefusalMixin, DcpDecodeKernelMixin, TRTLLMMLABackend):
    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.server_args = model_runner.server_args
        self.dcp_size_cfg = int(self.server_args.dcp_size)

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
"""


@pytest.mark.parametrize("hooks", ["`_forward_decode_dcp` hooks", "decode hooks"])
def test_sg203_a_mixin_calls_a_sibling_mixins_localizer_through_the_class_that_mixes_both(
    tmp_path: Path, hooks: str
) -> None:
    """Set 39's `DcpDecodeKernelMixin._launch_decode_from_batch_local` (a false positive before: `self._local` was
    unknown on the mixin, whose one user lives in another module) and its twin that launches with the whole lengths
    and hands only the fix-up this rank's share, as the set wrote them. Whether the module's docstring names a DCP
    hook changes nothing: the MLA launch beside `self.dcp_size` is what has the file read (before, that docstring
    was what admitted it, and without it the twin was missed)."""
    mixins = MLA_MIXINS.replace("`_forward_decode_dcp` hooks", hooks)
    found = check_fork_beside_sglang(tmp_path, {"mixins.py": mixins, "backend.py": BACKEND})
    assert [(f.code, f.symbol) for f in found.findings] == [("SG203", "DcpDecodeKernelMixin._launch_decode_from_batch")]

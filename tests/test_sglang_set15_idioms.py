"""What blind SGLang set 15 showed (issue 29), each case written as that set's backend is and its finding (or its
absence) checked:
- a backend whose constructor refuses DCP never runs under it: its launches are not judged with DCP on (SG106
  already read a constructor that refuses DP attention so; both now ask one question of the constructor);
- the DCP size a constructor reads from the server's arguments and keeps on the instance is the size the
  evaluation runs with, so a launch that localizes only past a test of it is read on the path DCP takes;
- the MLA metadata a function reaches through an object it was handed (a hybrid backend's decode backend) and
  leaves holding the whole lengths is a finding, and that object's own localizer gives this rank's share."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source
from tests.conftest import check_fork_beside_sglang


def _findings_beside_sglang(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    """The findings on a fork's module read beside SGLang 0.5.23's sources, whose classes it subclasses."""
    result = check_fork_beside_sglang(tmp_path, {"backend.py": textwrap.dedent(text)})
    return [(f.code, f.symbol) for f in result.findings]


REFUSING = """
import flashinfer
import torch
from sglang.srt.runtime_context import get_parallel

class NoDcpBackend:
    def __init__(self, model_runner):
        REFUSE
        self.model_runner = model_runner

    def forward_decode(self, query, kv_cache, forward_batch, metadata):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, seq_lens=forward_batch.seq_lens.to(torch.int32),
            block_tables=metadata.block_kv_indices,
        )

    def _forward_decode_dcp(self, query, kv_cache, forward_batch, metadata):
        return self.forward_decode(query, kv_cache, forward_batch, metadata)
"""


@pytest.mark.parametrize(
    ("refusal", "flagged"),
    [
        ('if get_parallel().attn_dcp_size > 1:\n            raise ValueError("no DCP here")', False),
        ("if get_parallel().attn_dcp_size > 1:\n            self.warned = True", True),
    ],
    ids=["refuses", "only notes it"],
)
def test_a_backend_whose_constructor_refuses_dcp_is_not_judged_under_it(refusal: str, flagged: bool) -> None:
    """Set 15's `ForkNoDcpVerifyMLABackend`: the constructor raises with more than one DCP rank."""
    codes = [f.code for f in check_source(textwrap.dedent(REFUSING).replace("REFUSE", refusal))]
    assert ("SG203" in codes) is flagged, codes


SERVER_ARGS_SIZE = """
import torch
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend

class ServerArgsBackend(TRTLLMMLABackend):
    def __init__(self, model_runner, skip_prefill=False):
        super().__init__(model_runner, skip_prefill)
        self._dcp_size = model_runner.server_args.dcp_size
        self._dcp_rank = get_parallel().dcp_rank if self._dcp_size > 1 else 0

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        kv_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        if self._dcp_size > THRESHOLD:
            kv_lens = get_dcp_lens(kv_lens, self._dcp_size, self._dcp_rank)
        return self._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens.to(torch.int32), max_seq_len=metadata.max_seq_len_k, layer=layer, return_lse=True,
        )
"""


@pytest.mark.parametrize(("threshold", "flagged"), [("1", False), ("2", True)], ids=["any DCP", "more than two"])
def test_the_dcp_size_a_constructor_keeps_is_the_size_the_launch_is_read_with(
    tmp_path: Path, threshold: str, flagged: bool
) -> None:
    """Set 15's `ForkTrtllmMLAServerArgsBackend`: `self._dcp_size = model_runner.server_args.dcp_size`; a fork that
    localizes only above two ranks launches with the whole lengths on two."""
    found = _findings_beside_sglang(tmp_path, SERVER_ARGS_SIZE.replace("THRESHOLD", threshold))
    assert found == ([("SG203", "ServerArgsBackend._forward_decode_dcp")] if flagged else []), found


HYBRID = """
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.runtime_context import get_parallel

class VerifyOnDecodeBackend(HybridAttnBackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        if not (forward_batch.forward_mode.is_target_verify() and get_parallel().dcp_enabled):
            return
        metadata = self.decode_backend.forward_decode_metadata
        metadata.seq_lens_k = LENS
        forward_batch.decode_trtllm_mla_metadata = metadata
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [
        ("metadata.global_seq_lens_k", True),
        ("self.decode_backend._get_dcp_local_seq_lens(metadata.global_seq_lens_k)", False),
    ],
    ids=["whole", "the decode backend's share"],
)
def test_a_field_of_metadata_reached_through_a_handed_backend_is_judged(
    tmp_path: Path, lens: str, flagged: bool
) -> None:
    """Set 15's `ForkHybridWholeLensBackend`: the decode backend is the constructor's argument, its metadata an
    object the function only names; what the function leaves in its `seq_lens_k` is what the launch reads."""
    found = _findings_beside_sglang(tmp_path, HYBRID.replace("LENS", lens))
    assert found == ([("SG203", "VerifyOnDecodeBackend.init_forward_metadata")] if flagged else []), found

"""What SG203 learned from blind SGLang sets 8 to 10 (issue 29): a kernel bound with `functools.partial` by a base
class's constructor is what the instance launches, whichever constructor runs and however it calls its base's; a
metadata's whole-lengths field may be unset, so the branch for that case is a path of its own; a fast plan
through the wrapper's compiled module plans with the lengths it is handed; a callable the constructor keeps is what
the lengths go through; and a buffer made with a token axis is a multi-token query. Each case is written as that set's
launcher or backend is, the finding (or its absence) checked."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

LAUNCHERS = """
import functools

import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel, get_server_args

class BoundLauncher:
    def __init__(self, backend):
        self.backend = backend
        self._decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla, workspace_buffer=backend.workspace_buffer
        )

class ServerArgsLauncher(BoundLauncher):
    def __init__(self, backend, server_args=None):
        super().__init__(backend)
        server_args = server_args or get_server_args()
        self.dcp_size = server_args.dcp_size

class HostLensLauncher(ServerArgsLauncher):
    def launch(self, query, kv_cache, forward_batch):
        if self.dcp_size > 1:
            return self._decode(query=query, kv_cache=kv_cache, seq_lens=LENS, return_lse=True)
"""

WHOLE = "forward_batch.seq_lens_cpu"
SHARE = "get_dcp_lens(forward_batch.seq_lens_cpu, self.dcp_size, get_parallel().dcp_rank)"
CONSTRUCTORS = {
    "super().__init__": "super().__init__(backend)",
    "the base's function handed the instance": "BoundLauncher.__init__(self, backend)",
}


@pytest.mark.parametrize("call", CONSTRUCTORS.values(), ids=list(CONSTRUCTORS))
@pytest.mark.parametrize(("lens", "flagged"), [(WHOLE, True), (SHARE, False)], ids=["whole", "share"])
def test_a_kernel_a_base_constructor_binds_is_the_one_launched(call: str, lens: str, flagged: bool) -> None:
    source = textwrap.dedent(LAUNCHERS).replace("super().__init__(backend)", call).replace("LENS", lens)
    codes = [f.code for f in check_source(source)]
    assert codes == (["SG203"] if flagged else []), codes


FALLBACK = """
import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class FallbackBackend:
    def forward_decode(self, q, kv_cache, forward_batch, metadata):
        bs = forward_batch.batch_size
        if get_parallel().dcp_enabled:
            if metadata.global_seq_lens_k is not None:
                local = metadata.seq_lens_k[:bs]
            else:  # captured metadata without the hoisted global lengths
                local = LENS
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, seq_lens=local, return_lse=True
            )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [("forward_batch.seq_lens[:bs]", True), ("get_dcp_lens(forward_batch.seq_lens[:bs], 2, 0)", False)],
    ids=["whole", "share"],
)
def test_a_metadata_field_of_the_whole_lengths_may_be_unset(lens: str, flagged: bool) -> None:
    """`metadata.global_seq_lens_k` is None until a step fills it: the branch for that case is a path too."""
    codes = [f.code for f in check_source(textwrap.dedent(FALLBACK).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes


FAST_PLAN = """
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

def fast_plan(self, qo_indptr_cpu, kv_indptr_cpu, kv_indices, kv_len_arr_cpu, num_heads, head_dim_ckv, causal):
    self._cached_module.plan(
        self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer,
        qo_indptr_cpu, kv_indptr_cpu, kv_len_arr_cpu, num_heads, head_dim_ckv, causal,
    )

def replan_decode(wrapper, forward_batch, qo_indptr_cpu, kv_indptr_cpu, kv_indices):
    bs = forward_batch.batch_size
    if get_parallel().dcp_enabled:
        fast_plan(wrapper, qo_indptr_cpu, kv_indptr_cpu, kv_indices, LENS, 16, 512, False)
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [("forward_batch.seq_lens_cpu[:bs]", True), ("get_dcp_lens(forward_batch.seq_lens_cpu[:bs], 2, 0)", False)],
    ids=["whole", "share"],
)
def test_a_fast_plan_through_the_wrappers_compiled_module_is_a_plan(lens: str, flagged: bool) -> None:
    """SGLang's sync-free `fast_mla_decode_plan` hands the lengths to the wrapper's compiled module's own `plan`
    (blind set 9's `replan_decode_fast`)."""
    codes = [f.code for f in check_source(textwrap.dedent(FAST_PLAN).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes


KEPT_CALLABLE = """
import flashinfer
import torch
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class KeptLensBackend:
    def __init__(self):
        self._kernel_lens = lambda s: LENS

    def forward_decode(self, q, kv_cache, forward_batch):
        bs = forward_batch.batch_size
        if get_parallel().dcp_enabled:
            kv_lens = self._kernel_lens(forward_batch.seq_lens[:bs])
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, seq_lens=kv_lens, return_lse=True
            )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [("s.to(torch.int32)", True), ("get_dcp_lens(s, 2, 0).to(torch.int32)", False)],
    ids=["whole", "share"],
)
def test_a_callable_the_constructor_keeps_is_what_the_lengths_go_through(lens: str, flagged: bool) -> None:
    """A lambda stored on the instance in `__init__` and applied to the lengths in a step (blind set 10's
    `LensFnCuteDslMLABackend` and its twin)."""
    codes = [f.code for f in check_source(textwrap.dedent(KEPT_CALLABLE).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes


PADDED_QUERY = """
import flashinfer
from sglang.srt.runtime_context import get_parallel

def draft_extend_dcp(q, kv_cache, forward_batch, metadata, heads, dim):
    bs = forward_batch.batch_size
    padded = q.new_zeros((bs, TOKENS, heads, dim))
    if get_parallel().dcp_enabled:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=padded, kv_cache=kv_cache, seq_lens=metadata.seq_lens_k, return_lse=True
        )
"""


@pytest.mark.parametrize(("tokens", "flagged"), [("metadata.max_seq_len_q", True), ("1", False)], ids=["ragged", "one"])
def test_a_buffer_made_with_a_token_axis_is_a_multi_token_query(tokens: str, flagged: bool) -> None:
    """A draft extend pads its ragged query into `q.new_zeros((bs, max_q, heads, dim))` (blind set 10's
    `ForkCuteDslMLABackend.draft_extend_dcp`): launched under DCP without the global causal bound."""
    codes = [f.code for f in check_source(textwrap.dedent(PADDED_QUERY).replace("TOKENS", tokens))]
    assert codes == (["SG203"] if flagged else []), codes


FALLBACK_IN_A_TRY = """
import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class TryLocalBackend:
    def _local_lens(self, seq_lens):
        parallel = get_parallel()
        return get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)

    def forward_decode(self, q, kv_cache, forward_batch):
        bs = forward_batch.batch_size
        if get_parallel().dcp_enabled:
            try:
                kv_lens = self._local_lens(forward_batch.seq_lens[:bs])
            except RuntimeError:
                FALLBACK
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, seq_lens=kv_lens, return_lse=True
            )
"""


@pytest.mark.parametrize(
    ("fallback", "flagged"),
    [("kv_lens = forward_batch.seq_lens[:bs]", True), ("raise", False)],
    ids=["whole-lengths-fallback", "re-raised"],
)
def test_a_localizer_that_may_raise_in_a_helper_is_a_path_of_its_own(fallback: str, flagged: bool) -> None:
    """The localizer is called in a method the step calls inside a `try` whose handler falls back to the whole
    lengths (blind set 9's `TryLocalCuteDslMLABackend._dcp_decode`): the path where it raised is judged alone."""
    codes = [f.code for f in check_source(textwrap.dedent(FALLBACK_IN_A_TRY).replace("FALLBACK", fallback))]
    assert codes == (["SG203"] if flagged else []), codes


SCOPED_LENGTHS = """
import contextlib

import flashinfer
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

@contextlib.contextmanager
def rank_local_seq_lens(forward_batch):
    saved = forward_batch.seq_lens
    forward_batch.seq_lens = get_dcp_lens(saved, 2, 0)
    try:
        yield forward_batch.seq_lens
    finally:
        forward_batch.seq_lens = saved

class ScopedBackend:
    def forward_decode(self, q, kv_cache, forward_batch):
        if get_parallel().dcp_enabled:
            BODY
"""
LAUNCH = "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(q, kv_cache, seq_lens=forward_batch.seq_lens)"
INSIDE = f"with rank_local_seq_lens(forward_batch):\n                return {LAUNCH}"
AFTER = f"with rank_local_seq_lens(forward_batch):\n                pass\n            return {LAUNCH}"


@pytest.mark.parametrize(("body", "flagged"), [(INSIDE, False), (AFTER, True)], ids=["inside", "after"])
def test_a_context_manager_scopes_what_it_writes_to_its_block(body: str, flagged: bool) -> None:
    """A `@contextmanager` that swaps this rank's share into `forward_batch.seq_lens` and restores the whole lengths
    in its `finally` (blind set 11's `ContextView...DcpBackend` twins): a launch inside the block gets the share, one
    after it the whole lengths."""
    codes = [f.code for f in check_source(textwrap.dedent(SCOPED_LENGTHS).replace("BODY", body))]
    assert codes == (["SG203"] if flagged else []), codes


GATED_OVERRIDE = """
import flashinfer
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend

class HoistedBackend(TRTLLMMLABackend):
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, seq_lens=LENS, return_lse=True
        )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [("metadata.global_seq_lens_k[:bs]", True), ("metadata.seq_lens_k[:bs]", False)],
    ids=["whole", "share"],
)
def test_an_override_of_a_method_sglang_calls_under_dcp_is_read(lens: str, flagged: bool) -> None:
    """A file whose only DCP code overrides `_forward_decode_dcp`, which SGLang calls under `dcp_enabled` (the pack's
    `[dcp] gated_methods`; blind set 11's `dcp_helpers_backend`), is read though it never asks whether DCP is on."""
    codes = [f.code for f in check_source(textwrap.dedent(GATED_OVERRIDE).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes

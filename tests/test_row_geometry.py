"""SG202 on the evaluator (issue 28): row geometry is a property of values, so the rows and the bound are compared
where the kernel is launched, whoever launches it and however they were expanded. Each flagged case was missed by
the rule that read spellings in the launching function; each clean case is the same shape done right."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla


class Launcher:
    def _launch(self, q, kv_cache, block_table, seq_lens, extra):
        return trtllm_batch_decode_with_kv_cache_mla(
            query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **extra
        )

    def _rows(self, decode, num_rows):
        rows = torch.arange(num_rows)
        row_req = torch.searchsorted(decode.query_start_loc[1:], rows, right=True)
        decode.row_req = row_req
        return decode.block_table[row_req], decode.seq_lens[row_req], row_req
"""

FLAGGED = {
    "the kernel launched by a helper, the bound per request": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode):
                block_table, seq_lens, _ = self._rows(decode, q.shape[0])
                extra = {"causal_seqlens_kv_global": decode.dcp_tot_seq_lens}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    "the bound repeated for a uniform batch, the rows by searchsorted": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode):
                block_table, seq_lens, _ = self._rows(decode, q.shape[0])
                bound = decode.dcp_tot_seq_lens.repeat_interleave(decode.max_query_len)
                extra = dict(causal_seqlens_kv_global=bound)  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    "rows expanded by unsqueeze/expand/reshape, the bound not": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, n):
                block_table = decode.block_table.unsqueeze(1).expand(-1, n, -1).reshape(-1, 8)
                seq_lens = decode.seq_lens.unsqueeze(1).expand(-1, n).reshape(-1)
                extra = {}
                extra.update(causal_seqlens_kv_global=decode.dcp_tot_seq_lens)  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    # blind set 5: a module function handed the implementation (annotated), launching a partial a helper bound
    "a partial with the bound, made by a module helper, launched with the impl's rows": """
        import functools

        def _launcher(decode):
            return functools.partial(
                trtllm_batch_decode_with_kv_cache_mla, causal_seqlens_kv_global=decode.dcp_tot_seq_lens
            )

        def decode_rows(impl: Launcher, q, kv_cache, decode):
            launch = _launcher(decode)
            block_table, seq_lens, _ = impl._rows(decode, q.shape[0])
            return launch(query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens)  # flagged
    """,
    # blind set 6: a uniform fast path expands by repeat_interleave, a ragged one by a row map; the bound follows
    # only the row map
    "the bound follows one of two row maps": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, ragged, n):
                block_table, seq_lens, row_req = decode.block_table, decode.seq_lens, None
                if ragged:
                    block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                else:
                    block_table, seq_lens = block_table.repeat_interleave(n, dim=0), seq_lens.repeat_interleave(n)
                bound = decode.dcp_tot_seq_lens
                if row_req is not None:
                    bound = bound[row_req]
                extra = {"causal_seqlens_kv_global": bound}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    # path by path: what joined paths hid
    "the rows expanded on one branch of a test, the bound on the other": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal, n):
                block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
                if not causal:
                    block_table, seq_lens = block_table.repeat_interleave(n, dim=0), seq_lens.repeat_interleave(n)
                else:
                    bound = bound.repeat_interleave(n)
                extra = {"causal_seqlens_kv_global": bound}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    # blind set 6: the bound indexed under a narrower test than the rows (a uniform batch only)
    "the bound indexed by the row map only for a uniform batch": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal, uniform):
                block_table, seq_lens, row_req = decode.block_table, decode.seq_lens, None
                if not causal:
                    block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                bound = decode.dcp_tot_seq_lens
                if uniform and row_req is not None:
                    bound = bound[row_req]
                extra = {"causal_seqlens_kv_global": bound}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    # blind set 6: a conditional expression under an environment flag
    "the bound indexed only under a flag, in a conditional expression": """
        import os

        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal):
                block_table, seq_lens, row_req = decode.block_table, decode.seq_lens, None
                if not causal:
                    block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                flag = os.environ.get("EXPAND_BOUND") == "1"
                g = decode.dcp_tot_seq_lens
                extra = {"causal_seqlens_kv_global": g[row_req] if row_req is not None and flag else g}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    # blind sets 2 and 7: the map kept on the implementation from an earlier batch (a first-layer cache)
    "the bound gathered by a row map kept on the instance by an earlier call": """
        class Impl(Launcher):
            _kept_rows = None

            def _global_rows(self, row_req):
                if self._kept_rows is None:
                    self._kept_rows = row_req
                return self._kept_rows

            def forward_mqa(self, q, kv_cache, decode):
                block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                bound = decode.dcp_tot_seq_lens[self._global_rows(row_req)]
                extra = {"causal_seqlens_kv_global": bound}  # flagged
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
}

CLEAN = {
    "the bound indexed by the map the helper cached": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode):
                block_table, seq_lens, _ = self._rows(decode, q.shape[0])
                extra = {"causal_seqlens_kv_global": decode.dcp_tot_seq_lens[decode.row_req]}
                return self._launch(q, kv_cache, block_table, seq_lens, extra)
    """,
    "the bound gathered by the returned map with index_select": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode):
                block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                bound = decode.dcp_tot_seq_lens.index_select(0, row_req)
                return self._launch(q, kv_cache, block_table, seq_lens, {"causal_seqlens_kv_global": bound})
    """,
    "everything repeated by the same count": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, n):
                block_table = decode.block_table.repeat_interleave(n, dim=0)
                seq_lens = decode.seq_lens.repeat_interleave(n)
                bound = torch.repeat_interleave(decode.dcp_tot_seq_lens, n)
                return self._launch(q, kv_cache, block_table, seq_lens, {"causal_seqlens_kv_global": bound})
    """,
    "a partial without the bound, which the launch indexes by the impl's map": """
        import functools

        def _launcher(decode):
            return functools.partial(trtllm_batch_decode_with_kv_cache_mla, enable_dcp=True)

        def decode_rows(impl: Launcher, q, kv_cache, decode):
            launch = _launcher(decode)
            block_table, seq_lens, row_req = impl._rows(decode, q.shape[0])
            bound = decode.dcp_tot_seq_lens[row_req]
            return launch(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, causal_seqlens_kv_global=bound
            )
    """,
    # path by path: tests that depend on each other are taken together
    "the bound indexed where the row map exists (vLLM 0.33)": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal, multi_token):
                block_table, seq_lens, row_req = decode.block_table, decode.seq_lens, None
                if not causal:
                    if multi_token:
                        block_table, seq_lens, row_req = self._rows(decode, q.shape[0])
                bound = decode.dcp_tot_seq_lens
                if row_req is not None:
                    bound = bound[row_req]
                return self._launch(q, kv_cache, block_table, seq_lens, {"causal_seqlens_kv_global": bound})
    """,
    "the bound repeated under the same tests as the rows": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal, n):
                block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
                if not causal:
                    if n > 1:
                        block_table, seq_lens = block_table.repeat_interleave(n, dim=0), seq_lens.repeat_interleave(n)
                if not causal and n > 1:
                    bound = bound.repeat_interleave(n)
                return self._launch(q, kv_cache, block_table, seq_lens, {"causal_seqlens_kv_global": bound})
    """,
    "the bound expanded where it is not None": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, causal, n):
                block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
                if not causal:
                    block_table, seq_lens = block_table.repeat_interleave(n, dim=0), seq_lens.repeat_interleave(n)
                    if bound is not None:
                        bound = bound.repeat_interleave(n)
                return self._launch(q, kv_cache, block_table, seq_lens, {"causal_seqlens_kv_global": bound})
    """,
    "nothing expanded": """
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode):
                extra = {"causal_seqlens_kv_global": decode.dcp_tot_seq_lens}
                return self._launch(q, kv_cache, decode.block_table, decode.seq_lens, extra)
    """,
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_a_bound_that_does_not_follow_the_rows_is_flagged(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    assert [(f.code, f.line) for f in check_source(text)] == [("SG202", line)]


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_a_bound_expanded_by_the_same_map_is_not(source: str) -> None:
    assert check_source(HEAD + textwrap.dedent(source)) == []


def test_a_bound_that_may_be_in_a_mapping_it_cannot_read_is_not_decided(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specguard.composition import check_paths

    source = HEAD + textwrap.dedent(
        """
        class Impl:
            def forward_mqa(self, q, kv_cache, decode, launch_kwargs):
                # launch_kwargs: the builder's, with causal_seqlens_kv_global among them
                block_table, seq_lens, _ = Launcher()._rows(decode, q.shape[0])
                return trtllm_batch_decode_with_kv_cache_mla(
                    query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens, **launch_kwargs
                )
        """
    )
    (tmp_path / "impl.py").write_text(source)
    result = check_paths([tmp_path / "impl.py"], use_cache=False)
    assert result.findings == []
    [(_, judgement)] = result.undecided
    assert judgement.code == "SG202" and "`**launch_kwargs` may hold it" in judgement.why


def test_more_paths_than_it_follows_are_not_decided(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Six tests that each expand the rows and the bound their own way (64 paths, more than it follows): listed as
    not decided, not passed as if each path were seen."""
    from specguard.composition import check_paths

    expand = "block_table, bound = block_table.repeat_interleave(n{0}, dim=0), bound.repeat_interleave(n{0})"
    tests = "\n".join(f"                if t{i}:\n                    {expand.format(i)}" for i in range(6))
    source = HEAD + textwrap.dedent(
        f"""
        class Impl(Launcher):
            def forward_mqa(self, q, kv_cache, decode, n0, n1, n2, n3, n4, n5, t0, t1, t2, t3, t4, t5):
                block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
{tests}
                return self._launch(q, kv_cache, block_table, seq_lens, {{"causal_seqlens_kv_global": bound}})
        """
    )
    (tmp_path / "impl.py").write_text(source)
    result = check_paths([tmp_path / "impl.py"], use_cache=False)
    assert result.findings == []
    [(_, judgement)] = result.undecided
    assert judgement.code == "SG202" and "more than 32 paths" in judgement.why

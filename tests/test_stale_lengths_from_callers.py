"""SG105 judges what a speculator hands a shared helper (issue 28: "context from callers"): the helper trusts the
DCP-local lengths its caller passes, so lengths that are the instance's state (prepared before the call, by the
target model or an earlier step) are stale at the call; lengths prepared in the method, or none (the helper then
prepares its own), are the draft's own."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
from functools import partial

from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


def build_attn_metadata(*, num_reqs, seq_lens, dcp_local_seq_lens=None):
    ...


class DraftModelSpeculator:
    def _build_uniform_attn_metadata(self, num_reqs, step, dcp_local_seq_lens=None):
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            num_reqs=num_reqs, seq_lens=self.input_buffers.seq_lens, dcp_local_seq_lens=dcp_local_seq_lens
        )
"""

PREPARE = """prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                    self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                )"""

FLAGGED = {
    "the target's lengths kept on the instance": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                return self._build_uniform_attn_metadata(  # flagged
                    num_reqs, step, dcp_local_seq_lens=self.target_dcp_local_seq_lens
                )
    """,
    "through **kwargs": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                extra = dict(step=step)
                extra.update(dcp_local_seq_lens=self.input_batch.dcp_local_seq_lens)
                return self._build_uniform_attn_metadata(num_reqs, **extra)  # flagged
    """,
    # blind set 8: a `@contextmanager` method yields the target batch's lengths, handed on by position
    "yielded by a context manager into the `as` target": """
        from contextlib import contextmanager

        class Drafter(DraftModelSpeculator):
            @contextmanager
            def _scope(self, input_batch):
                lens = input_batch.dcp_local_seq_lens
                try:
                    yield lens
                finally:
                    self.log_done()

            def propose(self, input_batch, num_reqs, step):
                with self._scope(input_batch) as lens:
                    return self._build_uniform_attn_metadata(num_reqs, step, lens)  # flagged
    """,
    # blind set 5: a partial stored by another method, binding the instance's buffer under a condition
    "bound in a partial another method stored": """
        class Drafter(DraftModelSpeculator):
            _decode = None

            def set_attn(self):
                self._decode = partial(
                    self._build_uniform_attn_metadata,
                    dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None,
                )

            def propose(self, num_reqs, step):
                return self._decode(num_reqs, step)  # flagged
    """,
    "bound in a partial": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                build = partial(self._build_uniform_attn_metadata, dcp_local_seq_lens=self.target_lens)
                return build(num_reqs, step)  # flagged
    """,
    # per draft step (issue 28): each step advances the global lengths
    "prepared once, before the loop of draft steps": f"""
        class Drafter(DraftModelSpeculator):
            def decode(self, num_reqs, num_steps):
                lens = {PREPARE}
                for step in range(1, num_steps):
                    self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=lens)  # flagged
                    self._run_decode_step(num_reqs, step)
    """,
    "prepared on the first step only, kept on the instance": f"""
        class Drafter(DraftModelSpeculator):
            def decode(self, num_reqs, num_steps):
                self._lens = None
                for step in range(1, num_steps):
                    if self._lens is None:
                        self._lens = {PREPARE}
                    self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=self._lens)  # flagged
    """,
    "handed in by the caller once, used on every step": """
        class Drafter(DraftModelSpeculator):
            def decode(self, num_reqs, num_steps, lens):
                for step in range(1, num_steps):
                    self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=lens)  # flagged
    """,
    "yielded by a generator that prepared them once": f"""
        class Drafter(DraftModelSpeculator):
            def _steps(self, num_reqs, num_steps):
                lens = {PREPARE}
                for step in range(1, num_steps):
                    yield step, lens

            def decode(self, num_reqs, num_steps):
                for step, lens in self._steps(num_reqs, num_steps):
                    self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=lens)  # flagged
    """,
    "a partial another method bound to the target's lengths": """
        class Drafter(DraftModelSpeculator):
            def on_target_batch(self, input_batch):
                self._step = partial(self._build_uniform_attn_metadata, dcp_local_seq_lens=input_batch.dcp_lens)

            def decode(self, num_reqs, num_steps):
                for step in range(1, num_steps):
                    self._step(num_reqs, step)  # flagged
    """,
    "the target model's batch, annotated": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch: "InputBatch", num_reqs):
                return self._build_uniform_attn_metadata(  # flagged
                    num_reqs, 1, dcp_local_seq_lens=batch.dcp_local_seq_lens
                )
    """,
    "the target model's batch, by the pack's parameter name": """
        class Drafter(DraftModelSpeculator):
            def propose(self, input_batch, num_reqs):
                return self._build_uniform_attn_metadata(  # flagged
                    num_reqs, 1, dcp_local_seq_lens=input_batch.dcp_local_seq_lens
                )
    """,
}

CLEAN = {
    "no lengths: the helper prepares its own": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                return self._build_uniform_attn_metadata(num_reqs, step)
    """,
    "prepared in the method itself": f"""
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                lens = {PREPARE}
                return self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=lens)
    """,
    "handed down from its own caller": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step, dcp_local_seq_lens):
                return self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=dcp_local_seq_lens)
    """,
    "a cache reset to None before the call": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs, step):
                self._lens = None
                return self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=self._lens)
    """,
    "prepared on every draft step": f"""
        class Drafter(DraftModelSpeculator):
            def decode(self, num_reqs, num_steps):
                for step in range(1, num_steps):
                    lens = {PREPARE}
                    self._build_uniform_attn_metadata(num_reqs, step, dcp_local_seq_lens=lens)
                    self._run_decode_step(num_reqs, step)
    """,
    "prepared before a loop that builds nothing, used once after it": f"""
        class Drafter(DraftModelSpeculator):
            def decode(self, num_reqs, groups):
                lens = {PREPARE}
                for group in groups:
                    group.reset()
                return self._build_uniform_attn_metadata(num_reqs, 1, dcp_local_seq_lens=lens)
    """,
    "a partial another method bound without lengths": """
        class Drafter(DraftModelSpeculator):
            def on_target_batch(self, input_batch):
                self._step = partial(self._build_uniform_attn_metadata)

            def decode(self, num_reqs, num_steps):
                for step in range(1, num_steps):
                    self._step(num_reqs, step)
    """,
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_the_instance_lengths_handed_to_the_helper_are_flagged_at_the_call(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    assert [(f.code, f.line) for f in check_source(text) if f.code == "SG105"] == [("SG105", line)]


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_lengths_of_the_draft_itself_are_not(source: str) -> None:
    assert [f for f in check_source(HEAD + textwrap.dedent(source)) if f.code == "SG105"] == []


def test_a_helper_that_recomputes_only_on_the_first_step_is_flagged_on_the_others() -> None:
    """Blind set 7: the shared helper prepares the lengths under `if step == 0:` and reads the buffer either way, so
    on later draft steps it builds with lengths an earlier step prepared. Joined, the buffer read "may be fresh";
    path by path, the path where the test is false hands the stale buffer."""
    source = textwrap.dedent(
        """
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


        def build_attn_metadata(*, num_reqs, seq_lens, dcp_local_seq_lens=None):
            ...


        class DraftModelSpeculator:
            def _build_uniform_attn_metadata(self, num_reqs, step, dcp_local_seq_lens=None):
                if dcp_local_seq_lens is None and self.dcp_size > 1:
                    if step == 0:
                        prepare_dcp_local_seq_lens(
                            self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                            self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                        )
                    dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
                return build_attn_metadata(
                    num_reqs=num_reqs, seq_lens=self.input_buffers.seq_lens, dcp_local_seq_lens=dcp_local_seq_lens
                )
        """
    )
    [finding] = [f for f in check_source(source) if f.code == "SG105"]
    assert "not the draft's own" in finding.message
    assert check_source(source.replace("if step == 0:", "if True:")) == []


def test_a_fallback_to_the_target_lengths_when_the_preparation_raises_is_flagged_on_that_path() -> None:
    """Blind set 8: the helper prepares the lengths in a `try` and falls back to the target's in the handler. The
    preparation is answered, not read: like a lookup's miss, its raise is what the `try` was written for, so the
    path where it raises is judged alone and named (before: listed as not decided; before that, silent). Where the
    handler raises again, no build gets the target's lengths."""
    source = textwrap.dedent(
        f"""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


        def build_attn_metadata(*, num_reqs, seq_lens, dcp_local_seq_lens=None):
            ...


        class DraftModelSpeculator:
            def _build_uniform_attn_metadata(self, num_reqs, step, dcp_local_seq_lens=None):
                if dcp_local_seq_lens is None:
                    try:
                        dcp_local_seq_lens = {PREPARE}
                    except RuntimeError:
                        dcp_local_seq_lens = self.target_input_buffers.dcp_local_seq_lens
                return build_attn_metadata(
                    num_reqs=num_reqs, seq_lens=self.input_buffers.seq_lens, dcp_local_seq_lens=dcp_local_seq_lens
                )
        """
    )
    [finding] = [f for f in check_source(source) if f.code == "SG105"]
    assert "`prepare_dcp_local_seq_lens(" in finding.message and "raises" in finding.message, finding.message
    assert check_source(source.replace("except RuntimeError:", "except RuntimeError:\n                raise\n")) == []

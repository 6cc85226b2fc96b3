"""Issue #8, acceptance: recursion through helpers and self-referencing attributes terminate; the bounds hold."""

from __future__ import annotations

from pathlib import Path

from specguard.rules.judging import BUDGET, MAX_DEPTH

CHECK_PAGE = Path(__file__).resolve().parents[2] / "docs" / "check.md"


def test_mutually_recursive_helpers_terminate_and_still_report(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class RecursiveSpeculator(DraftModelSpeculator):
            def _even(self, n, desc):
                if n == 0:
                    return desc.num_tokens
                return self._odd(n - 1, desc)

            def _odd(self, n, desc):
                return self._even(n - 1, desc) if n else self._odd(n, desc)

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = self._odd(3, batch_desc)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]


def test_recursion_across_modules_terminates(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec import ping

        class RecursiveSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=ping.ping(batch_desc))
        """,
        ping="from myspec import pong\n\ndef ping(d):\n    return pong.pong(d)\n",
        pong="from myspec import ping\n\ndef pong(d):\n    return ping.ping(d)\n",
    )
    assert checked.findings == []  # nothing ever returns a padded count


def test_self_referencing_attributes_terminate(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AccumulatingSpeculator(DraftModelSpeculator):
            def step(self, batch_desc: BatchExecutionDescriptor):
                self.total = self.total + batch_desc.num_tokens
                self.a = self.b
                self.b = self.a + self.total
                self.total = max(self.total, self.b)

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.a)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.line == checked.line("# flagged") and "`self.a`" in finding.message


def test_a_helper_chain_deeper_than_the_bound_is_cut(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """A chain of MAX_DEPTH helpers is followed; one more level is not (the documented bound)."""
    for depth, flagged in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False)):
        chain = [f"    def _h{i}(self, d):\n        return self._h{i + 1}(d)\n" for i in range(depth - 1)]
        checked = check_speculator(
            "class DeepSpeculator(DraftModelSpeculator):\n"
            + "".join(chain)
            + f"    def _h{depth - 1}(self, d):\n        return d.num_tokens\n"
            + "    def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):\n"
            + "        return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self._h0(batch_desc))\n"
        )
        assert [f.code for f in checked.findings] == (["SG103"] if flagged else []), depth


def test_loops_carry_values_from_one_iteration_to_the_next(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class LoopSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, steps):
                a, b = 0, 0
                for _ in range(steps):
                    self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=b)  # flagged
                    b = a
                    a = batch_desc.num_tokens
        """
    )
    assert [f.line for f in checked.findings] == [checked.line("# flagged")]


def test_the_docs_state_the_bound_the_code_has() -> None:
    page = " ".join(CHECK_PAGE.read_text().split())
    assert f"calls are followed {MAX_DEPTH} deep" in page
    assert f"a budget of {BUDGET:,} steps" in page

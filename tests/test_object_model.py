"""The evaluator follows values through objects, generators and shared helpers that decide the count themselves
(issue 28). The base here has the shape of vLLM 0.33.0's: the helper takes a descriptor and the query's offsets and
picks the padded count itself under FULL graphs, so what a speculator hands it decides. Each flagged case failed
before the change named beside it; each clean case is the same shape done right."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
from dataclasses import replace

import numpy as np

from vllm.config.compilation import CUDAGraphMode


class BatchExecutionDescriptor:
    cg_mode: CUDAGraphMode
    num_tokens: int


def build_attn_metadata(num_reqs, num_tokens, query_start_loc_cpu):
    return {}


class DraftModelSpeculator:
    def _build_attn_metadata(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
        num_tokens = (
            batch_desc.num_tokens if batch_desc.cg_mode == CUDAGraphMode.FULL else int(query_start_loc_np[-1])
        )
        return build_attn_metadata(num_reqs=num_reqs, num_tokens=num_tokens, query_start_loc_cpu=query_start_loc_np)

    def _build_uniform_attn_metadata(self, batch_desc: BatchExecutionDescriptor, num_reqs, width):
        return self._build_attn_metadata(num_reqs, batch_desc, self.arange_np[: num_reqs + 1] * width)
"""

FLAGGED = {
    # the descriptor's request count was not padded; `arange[:n + 1] * width` was an array of unknown content
    "the padded request count, as the uniform helper's requests": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                return self._build_uniform_attn_metadata(batch_desc, batch_desc.num_reqs, 1)  # flagged
    """,
    # a count rounded up to an alignment was only "derived from the count" (issue 28: padded by meaning)
    "the request count rounded up to an alignment": """
        def round_up(x, y):
            return ((x + y - 1) // y) * y

        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                aligned = round_up(num_reqs, self.req_alignment)
                return self._build_uniform_attn_metadata(batch_desc, aligned, 1)  # flagged
    """,
    "the request count rounded up to a multiple of 8 by ceiling division": """
        def cdiv(a, b):
            return -(a // -b)

        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                return self._build_uniform_attn_metadata(batch_desc, cdiv(num_reqs, 8) * 8, 1)  # flagged
    """,
    # an item written into an array of unknown content was dropped
    "the padded count written as the last offset": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                offsets = np.array(self.arange_np[: num_reqs + 1], copy=True)
                offsets[num_reqs] = batch_desc.num_tokens
                return self._build_attn_metadata(num_reqs, batch_desc, offsets)  # flagged
    """,
    # the helper was not followed: only a `num_tokens=` argument was judged
    "a descriptor forced to FULL, handed to the helper": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                pinned = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
                return self._build_uniform_attn_metadata(pinned, num_reqs, 1)  # flagged
    """,
    # numpy's append was an unknown
    "offsets that end at the padded count (numpy.append)": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                offsets = np.append(self.arange_np[: num_reqs + 1], np.int32(batch_desc.num_tokens))
                return self._build_attn_metadata(num_reqs, batch_desc, offsets)  # flagged
    """,
    # a callee with one way out cleared the caller's writes; a dropped call was not followed
    "the forced descriptor stored on self by another method": """
        class Drafter(DraftModelSpeculator):
            def _pin(self):
                self.attn_desc = replace(self.decode_desc, cg_mode=CUDAGraphMode.FULL)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                self.decode_desc = batch_desc
                self._pin()
                return self._build_uniform_attn_metadata(self.attn_desc, num_reqs, 1)  # flagged
    """,
    # a generator was an unknown
    "counts yielded by a generator": """
        def step_counts(batch_desc, steps):
            for step in range(steps):
                yield step, batch_desc.num_tokens


        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, steps):
                for step, count in step_counts(batch_desc, steps):
                    offsets = np.append(self.arange_np[: num_reqs + 1], count)
                    self._build_attn_metadata(num_reqs, batch_desc, offsets)  # flagged
    """,
    # the assertion's test was a doubt on every path after it
    "past an assertion that holds whenever the build runs": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, ready):
                assert ready is not None
                pinned = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
                return self._build_uniform_attn_metadata(pinned, num_reqs, 1)  # flagged
    """,
    # blind set 4: two descriptors read from one dict by their keys are two batches
    "the guard on one key's descriptor, the count from another's": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, descs: dict[str, BatchExecutionDescriptor], num_reqs):
                decode = descs.get("decode", descs["prefill"])
                n = decode.num_reqs if descs["prefill"].cg_mode == CUDAGraphMode.FULL else num_reqs
                return self._build_uniform_attn_metadata(decode, n, 1)  # flagged
    """,
    # blind set 4: a function handed its batch's descriptor builds through a dict of builders its class stored
    "a builder looked up in a dict the class stored, outside speculators": """
        class MetadataPlanner:
            def __init__(self):
                self._builders = {"decode": build_attn_metadata}

            def plan(self, batch_desc: BatchExecutionDescriptor, num_reqs, offsets):
                build = self._builders["decode"]
                count = batch_desc.num_tokens
                return build(num_reqs=num_reqs, num_tokens=count, query_start_loc_cpu=offsets)  # flagged
    """,
    # blind set 6: a guard on the compilation config's mode (a setting of the process, not this batch's), in an
    # `and` with a test the evaluation cannot decide: the setting is taken each way, the other operand after it
    "a guard on the configured mode and a walrus, not on the batch": """
        class VllmConfig:
            cudagraph_mode: CUDAGraphMode

        class Drafter(DraftModelSpeculator):
            def __init__(self, vllm_config: VllmConfig):
                self.vllm_config = vllm_config
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, more):
                n = num_reqs
                if self.vllm_config.cudagraph_mode == CUDAGraphMode.FULL and (padded := batch_desc.num_reqs) > more:
                    n = padded
                return self._build_uniform_attn_metadata(batch_desc, n, 1)  # flagged
    """,
    # padded by meaning (issue 28): the next size at least as large as the count, whatever the sizes are called
    "the first size at least as large as the count": """
        class Drafter(DraftModelSpeculator):
            def __init__(self, sizes):
                self.arange_np = np.arange(65, dtype=np.int32)
                self.sizes = sizes

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                chosen = next((s for s in sorted(self.sizes) if s >= num_reqs), num_reqs)
                return self._build_uniform_attn_metadata(batch_desc, chosen, 1)  # flagged
    """,
    "the smallest size over the count": """
        class Drafter(DraftModelSpeculator):
            def __init__(self, sizes):
                self.arange_np = np.arange(65, dtype=np.int32)
                self.sizes = sizes

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                chosen = min(s for s in self.sizes if num_reqs <= s)
                return self._build_uniform_attn_metadata(batch_desc, chosen, 1)  # flagged
    """,
    # blind set 8: a dict keyed by the modes that take the real counts; the others fall through to the padded ones
    "the real count only for the modes a dict names": """
        class ModelState:
            def prepare_attn(self, batch_desc: BatchExecutionDescriptor, cudagraph_mode: CUDAGraphMode, offsets):
                real = {CUDAGraphMode.NONE: int(offsets[-1])}
                count = real.get(cudagraph_mode, batch_desc.num_tokens)
                return build_attn_metadata(num_reqs=1, num_tokens=count, query_start_loc_cpu=offsets)  # flagged
    """,
}

CLEAN = {
    "the real count for every mode a dict names but FULL": """
        class ModelState:
            def prepare_attn(self, batch_desc: BatchExecutionDescriptor, cudagraph_mode: CUDAGraphMode, offsets):
                real = {CUDAGraphMode.NONE: int(offsets[-1]), CUDAGraphMode.PIECEWISE: int(offsets[-1])}
                count = real.get(cudagraph_mode, batch_desc.num_tokens)
                return build_attn_metadata(num_reqs=1, num_tokens=count, query_start_loc_cpu=offsets)
    """,
    "the first size at least as large as the count, under FULL graphs only": """
        class Drafter(DraftModelSpeculator):
            def __init__(self, sizes):
                self.arange_np = np.arange(65, dtype=np.int32)
                self.sizes = sizes

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                chosen = num_reqs
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    chosen = next((s for s in sorted(self.sizes) if s >= num_reqs), num_reqs)
                return self._build_uniform_attn_metadata(batch_desc, chosen, 1)
    """,
    "sizes filtered by a bound, not chosen for the count": """
        class Drafter(DraftModelSpeculator):
            def __init__(self, sizes):
                self.arange_np = np.arange(65, dtype=np.int32)
                self.sizes = sizes

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                small = [s for s in self.sizes if s <= num_reqs]
                return self._build_uniform_attn_metadata(batch_desc, num_reqs, len(small) or 1)
    """,
    "the batch's own mode in an `and` with a walrus": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, more):
                n = num_reqs
                if batch_desc.cg_mode == CUDAGraphMode.FULL and (padded := batch_desc.num_reqs) > more:
                    n = padded
                return self._build_uniform_attn_metadata(batch_desc, n, 1)
    """,
    "the guard on the descriptor read by the key handed to the helper": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, descs: dict[str, BatchExecutionDescriptor], num_reqs):
                decode = descs.get("decode", descs["prefill"])
                n = decode.num_reqs if descs["decode"].cg_mode == CUDAGraphMode.FULL else num_reqs
                return self._build_uniform_attn_metadata(decode, n, 1)
    """,
    "a builder from the class's dict, the padded count only under FULL graphs": """
        class MetadataPlanner:
            def __init__(self):
                self._builders = {"decode": build_attn_metadata}

            def plan(self, batch_desc: BatchExecutionDescriptor, num_reqs, offsets):
                full = batch_desc.cg_mode == CUDAGraphMode.FULL
                num_tokens = batch_desc.num_tokens if full else int(offsets[-1])
                return self._builders["decode"](num_reqs=num_reqs, num_tokens=num_tokens, query_start_loc_cpu=offsets)
    """,
    "the real request count, as the uniform helper's requests": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1)
    """,
    "the request count divided, not rounded": """
        class Drafter(DraftModelSpeculator):
            def __init__(self):
                self.arange_np = np.arange(65, dtype=np.int32)

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, width):
                return self._build_uniform_attn_metadata(batch_desc, num_reqs * width // width, 1)
    """,
    "the real count written as the last offset": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, real):
                offsets = np.array(self.arange_np[: num_reqs + 1], copy=True)
                offsets[num_reqs] = real
                return self._build_attn_metadata(num_reqs, batch_desc, offsets)
    """,
    "the dispatcher's descriptor, as it is": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1)
    """,
    "offsets of the real query": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                offsets = np.append(self.arange_np[:num_reqs], np.int32(num_reqs))
                return self._build_attn_metadata(num_reqs, batch_desc, offsets)
    """,
    "the descriptor stored on self by another method, unchanged": """
        class Drafter(DraftModelSpeculator):
            def _keep(self):
                self.attn_desc = self.decode_desc

            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                self.decode_desc = batch_desc
                self._keep()
                return self._build_uniform_attn_metadata(self.attn_desc, num_reqs, 1)
    """,
    "a generator that yields the padded count only under FULL graphs": """
        def step_counts(batch_desc, num_reqs, steps):
            for step in range(steps):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    yield step, batch_desc.num_tokens
                else:
                    yield step, num_reqs


        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, steps):
                for step, count in step_counts(batch_desc, num_reqs, steps):
                    offsets = np.append(self.arange_np[:num_reqs], count)
                    self._build_attn_metadata(num_reqs, batch_desc, offsets)
    """,
    "an assertion of FULL graphs before the forced descriptor": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                assert batch_desc.cg_mode == CUDAGraphMode.FULL
                pinned = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
                return self._build_uniform_attn_metadata(pinned, num_reqs, 1)
    """,
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_a_padded_count_that_reaches_the_helper_through_an_object_is_flagged(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    assert [(f.code, f.line) for f in check_source(text)] == [("SG103", line)]


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_the_same_shapes_done_right_are_clean(source: str) -> None:
    assert check_source(HEAD + textwrap.dedent(source)) == []


def test_a_padded_count_capped_by_min_is_said_not_dropped(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`min(padded, cap)`: a cap is not the real count, so which is smaller is not known. The site is listed as not
    decided with that reason (before, `min` kept only what every input was derived from, and it went silent)."""
    source = """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc: BatchExecutionDescriptor, num_reqs, cap):
                total = min(batch_desc.num_tokens, cap)
                offsets = np.append(self.arange_np[: num_reqs + 1], total)
                return self._build_attn_metadata(num_reqs, batch_desc, offsets)  # undecided
    """
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# undecided" in row)
    (tmp_path / "spec.py").write_text(text)
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    assert out.stderr.splitlines()[1:] == [
        f"specguard: not decided: spec.py:{line}: SG103 `Drafter.propose`: `num_tokens=` of `build_attn_metadata`: "
        "`min` of a derived value and one that is not (the real count, or a cap): which is smaller is not known"
    ]

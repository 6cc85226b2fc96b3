"""G5 at the metadata boundary: G0's build wrapper hands each outermost build here, after G0's own check.

What a build's lengths must be (specguard/runtime/lengths.py) is read from host memory only: `seq_lens` and
`dcp_local_seq_lens` are device tensors on a GPU, where the runner keeps no exact host copy (its
`seq_lens_cpu_upper_bound` is "optimistic for async-spec decode rows"), so there each build G5 would judge
is a counted skip; on vLLM's CPU build (and wherever the tensors are host memory) every such build is
checked, by the relations lengths.py cites: lengths within max_model_len and max_seq_len; under DCP, the
rank-local lengths of any build against the builder's DCP geometry; for a draft build with a step index (V1
`build_for_drafting`'s `draft_index`, V2 the shared helper's `step`), the step before of the same builder on
this thread, and where that does not decide it, the slot each request's last query token is written at.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from specguard.runtime import lengths
from specguard.runtime.host import host_list
from specguard.runtime.patching import Skip
from specguard.runtime.policy import POLICY, Site

DEVICE_LENGTHS = "seq_lens is device memory: reading it would synchronise the device"
# vLLM's KV-cache spec classes (vllm/v1/kv_cache_interface.py) whose layers write a query token's KV at the slot
# of its position in the request's block-table row, and those among their subclasses that do not
PAGED_SPECS = ("FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec")
UNPAGED_SPECS = ("CrossAttentionSpec", "EncoderOnlyAttentionSpec")


class LastStep:
    """A builder's last draft step on this thread, one object per builder that each step overwrites (a new
    object, or a weak dictionary's new entry, per build would cost more than the check it serves)."""

    __slots__ = ("step", "seq_lens", "query_lens")

    def __init__(self) -> None:
        self.step: int | None = None
        self.seq_lens: list[int] = []
        self.query_lens: list[int] = []


class _Thread(threading.local):
    # builder -> its last draft step's lengths on this thread (a runner thread builds its steps in order)
    steps: weakref.WeakKeyDictionary | None = None


_tls = _Thread()
_geometry: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # builder -> (world, rank, interleave)
_facts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # builder -> BuilderFacts


def _last_step(builder: Any) -> LastStep:
    steps = _tls.steps
    if steps is None:
        steps = _tls.steps = weakref.WeakKeyDictionary()
    try:
        return steps[builder]
    except KeyError:
        last = steps[builder] = LastStep()
        return last
    except TypeError:  # not weakly referenceable: no step before is known
        return LastStep()


def _dcp_rank(builder: Any) -> int:
    rank = getattr(builder, "dcp_rank", None)
    if isinstance(rank, int):
        return rank
    try:  # the MLA builders keep only the world size
        from vllm.distributed.parallel_state import get_dcp_group

        return int(get_dcp_group().rank_in_group)
    except Exception as exc:  # noqa: BLE001 -- no DCP group in this process: nothing to judge the lengths by
        raise Skip(f"this rank's DCP rank is unknown ({type(exc).__name__})") from exc


def _interleave(builder: Any) -> int | None:
    for name in ("cp_kv_cache_interleave_size", "dcp_kv_cache_interleave_size"):
        value = getattr(builder, name, None)
        if isinstance(value, int):
            return value
    config = getattr(getattr(builder, "vllm_config", None), "parallel_config", None)
    value = getattr(config, "cp_kv_cache_interleave_size", None)
    return value if isinstance(value, int) else None


def dcp_geometry(builder: Any) -> tuple[int, int, int]:
    """(world, rank, interleave) this builder's rank-local lengths are computed with."""
    try:
        return _geometry[builder]
    except (KeyError, TypeError):
        pass
    if getattr(builder, "use_pcp", False) is True:
        raise Skip("prefill context parallelism: the local lengths also split over PCP ranks")
    world, interleave = getattr(builder, "dcp_world_size", None), _interleave(builder)
    if not isinstance(world, int) or interleave is None:
        raise Skip("the builder names no DCP world size or KV interleave")
    geometry = (world, _dcp_rank(builder) if world > 1 else 0, interleave)
    with contextlib.suppress(TypeError):  # not weakly referenceable: read again next time
        _geometry[builder] = geometry
    return geometry


def _draft_label(draft_index: int | None) -> str:
    return "target build" if draft_index is None else f"draft step {draft_index}"


class BuilderFacts(NamedTuple):
    """What G5 reads of a builder's configuration, once per builder (it is fixed when vLLM makes the builder)."""

    max_model_len: int | None
    # the KV block size where the layers write each query token's KV at the slot of its position in the
    # request's block-table row (full, sliding-window and chunked-local attention; not cross or encoder-only
    # attention, not Mamba state); None for any other
    paged_block_size: int | None
    one_dcp_rank: bool  # no DCP sharding configured: a position's slot is this rank's


def builder_facts(builder: Any) -> BuilderFacts:
    try:
        return _facts[builder]
    except (KeyError, TypeError):
        pass
    config = getattr(builder, "vllm_config", None)
    max_model_len = getattr(getattr(config, "model_config", None), "max_model_len", None)
    spec = getattr(builder, "kv_cache_spec", None)
    names = {c.__name__ for c in type(spec).__mro__}
    size = getattr(spec, "block_size", None)
    paged = not names.isdisjoint(PAGED_SPECS) and names.isdisjoint(UNPAGED_SPECS) and isinstance(size, int)
    configured = getattr(getattr(config, "parallel_config", None), "decode_context_parallel_size", None)
    facts = BuilderFacts(
        max_model_len=max_model_len if isinstance(max_model_len, int) else None,
        paged_block_size=size if paged else None,
        one_dcp_rank=getattr(builder, "dcp_world_size", None) in (None, 1) and configured in (None, 1),
    )
    with contextlib.suppress(TypeError):  # not weakly referenceable: read again next time
        _facts[builder] = facts
    return facts


def _slots_disagree(
    cm: Any, n: int, seq: list[int], q: list[int], offsets: list[int], block_size: int
) -> tuple[list, list] | None:
    """(slots, expected) of each request's last query token where some disagree; None where all agree or the
    relation does not apply (a non-causal build, device memory). A padding slot (-1: a position past
    max_model_len) is no claim about a position. Plain Python over the rows: for the few requests of a draft
    step it costs less than numpy's calls would."""
    table, slot_mapping = cm.block_table_tensor, cm.slot_mapping
    if getattr(cm, "causal", True) is not True:
        return None
    if getattr(table, "is_cpu", None) is not True or getattr(slot_mapping, "is_cpu", None) is not True:
        return None
    table = table.numpy()
    width, tokens = table.shape[1], slot_mapping.shape[0]
    ends = offsets[1:]
    wanted = [e - 1 for e in ends if 0 < e <= tokens]
    if tokens <= 4 * n:  # a draft step's few tokens: read whole, cheaper than a numpy view
        every = slot_mapping.tolist()
        last = [every[i] for i in wanted]
    else:  # a long step's last tokens in one gather, not n reads
        last = slot_mapping.numpy()[wanted].tolist()
    item = table.item
    try:  # every row a request with its last token written where its length says: the healthy step, at once
        if last == [item(i, (s - 1) // block_size) * block_size + (s - 1) % block_size for i, s in enumerate(seq)]:
            return None
    except (IndexError, ValueError):  # a row this cannot read: the rows one by one below say which
        pass
    slots: list = [None] * n
    expected: list = [None] * n
    disagree = False
    k = 0
    for i in range(n):
        end = ends[i]
        if not 0 < end <= tokens:
            continue
        got = last[k]
        k += 1
        position = seq[i] - 1
        if q[i] <= 0 or position < 0 or got < 0 or position // block_size >= width:
            continue
        want = item(i, position // block_size) * block_size + position % block_size
        if got != want:
            slots[i], expected[i], disagree = got, want, True
    return (slots, expected) if disagree else None


def check(
    builder: Any,
    cm: Any,
    draft_index: int | None,
    site: Site,
    subject_of: Callable[[Any], str],
    offsets: list[int] | None = None,
) -> Any:
    """Run from G0's wrapper through `run_check`: the Violation of the first relation broken, or None.
    `offsets`: query_start_loc_cpu's first num_reqs + 1 entries where G0 already read them; `subject_of` names
    the builder in a message (only a violation needs it)."""
    violation = _first_broken(builder, cm, draft_index, site, offsets)
    return None if violation is None else dataclasses.replace(violation, subject=subject_of(builder))


def _first_broken(builder: Any, cm: Any, draft_index: int | None, site: Site, offsets: list[int] | None) -> Any:
    n = cm.num_reqs
    local_t = getattr(cm, "dcp_local_seq_lens", None)
    seq = host_list(cm.seq_lens, n, "seq_lens")  # host memory: the caller skipped device lengths
    if offsets is None:
        offsets = host_list(cm.query_start_loc_cpu, n + 1, "query_start_loc_cpu")
    q = list(map(operator.sub, offsets[1:], offsets[:-1]))
    label = _draft_label(draft_index)
    facts = builder_facts(builder)
    max_model_len = facts.max_model_len
    max_seq_len = getattr(cm, "max_seq_len", None)
    violation = lengths.check_length_bounds(
        seq,
        max_seq_len=max_seq_len if type(max_seq_len) is int else None,
        max_model_len=max_model_len,
        step=label,
        site=site.name,
        subject="",
    )
    if violation is not None:
        return violation
    world = 1
    if local_t is not None:
        local = host_list(local_t, n, "dcp_local_seq_lens")
        world, rank, interleave = dcp_geometry(builder)
        violation = lengths.check_dcp_local_lengths(
            seq, local, q, world=world, rank=rank, interleave=interleave, step=label, site=site.name, subject=""
        )
        if violation is not None:
            return violation
    if draft_index is None:
        return None
    last = _last_step(builder)
    chained = last.step == draft_index - 1 and len(last.seq_lens) == n
    previous_seq, previous_q = last.seq_lens, last.query_lens
    last.step, last.seq_lens, last.query_lens = draft_index, seq, q
    if chained:
        violation = lengths.check_draft_step_lengths(
            previous_seq,
            previous_q,
            seq,
            q,
            max_model_len=max_model_len,
            step=draft_index,
            site=site.name,
            subject="",
        )
        if violation is not None:
            return violation
        if all(b == 1 for b in previous_q):
            return None  # every row followed exactly from the step before
    # The first draft build of a chain, or one after a multi-token step: judged by where each request's last
    # query token is written. Under DCP a position's slot is on one rank only, and a group may not be sharded:
    # the local lengths above are what is judged there.
    block_size = facts.paged_block_size
    judged = world == 1 and facts.one_dcp_rank and block_size is not None
    disagree = _slots_disagree(cm, n, seq, q, offsets, block_size) if judged else None
    if disagree is None:
        return None
    return lengths.check_last_token_slots(seq, *disagree, step=label, site=site.name, subject="")


def wanted(cm: Any, draft_index: int | None) -> bool:
    """Whether G5 has anything to judge in this build (cheap: two attribute reads)."""
    return draft_index is not None or getattr(cm, "dcp_local_seq_lens", None) is not None


def site_for(g0_site: Site) -> Site:
    return POLICY.site("G5", g0_site.name)

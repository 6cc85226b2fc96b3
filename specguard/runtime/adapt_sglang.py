"""SGLang's adapter (0.5.23): G6 at the first attention launch after the forward declined to plan again, and
SGLang's own FlashInfer planner for G1.

G6. A pre-planner (the EAGLE draft path, a graph runner's load_batch) plans a batch's attention metadata outside
the forward and marks it ready; `ForwardBatch.mark_forward_metadata_ready` records the batch size and token rows
it had. DP-attention padding (`prepare_mlp_sync_batch`) can reshape the batch afterwards, and
`ForwardBatch.needs_forward_metadata_init()` is where the forward is told whether to plan again. Its answer is not
the last word: the eager extend path plans target-verify and context-parallel batches whatever it says. So every
attention backend's `init_forward_metadata*` records on the batch the shape it planned it for (the eager runner's
copy of a batch keeps that record), the decision is only noted (an AFTER hook, registered with SGLang's
HookRegistry: a False answer on a marked batch whose shape differs from the one last planned, or the mark's where
no plan was seen; host integers), a plan since clears the note, and the judgment is made where the kernels would
run: the first `AttentionBackend.forward` on the noted batch (a BEFORE hook, also through the HookRegistry). The
hooks return None, so SGLang's answers, arguments and copies are never changed; the record and the note are
private attributes on the batch.

G1. SGLang installs `fast_prefill_plan` as a per-instance `begin_forward` of FlashInfer prefill wrappers; it is
wrapped to record the layout as `plan()` does (FlashInfer's own `fast_decode_plan` is wrapped by
adapt_flashinfer). Installed at plugin load, before any backend binds it, so SGLang's test of which planner a
wrapper uses (`begin_forward.func is fast_prefill_plan`) keeps its answer.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from specguard.runtime import invariants as inv
from specguard.runtime.adapt_flashinfer import _prefill_recorder, wrap_planner
from specguard.runtime.patching import Patcher, arg_binder, guard_call, mark, run_check, subclasses
from specguard.runtime.policy import POLICY

BATCH_MODULE = "sglang.srt.model_executor.forward_batch_info"
BACKEND_MODULE = "sglang.srt.layers.attention.base_attn_backend"
PLANNER_MODULE = "sglang.srt.layers.attention.flashinfer_backend"
DECISION = f"{BATCH_MODULE}.ForwardBatch.needs_forward_metadata_init"
LAUNCH = f"{BACKEND_MODULE}.AttentionBackend.forward"
SITE = "AttentionBackend.forward after ForwardBatch.needs_forward_metadata_init"
NOTE_ATTR = "_specguard_stale_plan"  # on a ForwardBatch: the violation its next attention launch would be
PLANNED_ATTR = "_specguard_planned"  # on a ForwardBatch: (batch size, rows) a backend last planned it for
COPY = "sglang.srt.model_executor.runner.eager_runner.EagerRunner.load_batch"
PLANS = "init_forward_metadata"  # every backend method whose name starts so plans (eager, graph capture, replay)


class _Installed:
    patcher: Patcher | None = None
    planners_seen = 0  # AttentionBackend subclasses whose planners were wrapped (walked again when more exist)
    decided = False  # whether a decision was seen since install


def _rows(batch: Any) -> int:
    # As mark_forward_metadata_ready records them: a batch without input_ids has 0 rows.
    ids = batch.input_ids
    return 0 if ids is None else int(ids.shape[0])


def _note_decision(batch: Any) -> None:
    """After a False answer: note the violation a launch on this batch would be, unless the batch has the shape
    it was last planned for (by a backend since the guard wraps them, else as the mark recorded)."""
    note = None
    if batch.forward_metadata_ready:
        planned = _planned_shape(batch) or (
            batch.forward_metadata_planned_bs,
            batch.forward_metadata_planned_num_tokens,
        )
        note = inv.check_preplanned_batch(
            *planned,
            int(batch.batch_size),
            _rows(batch),
            site=SITE,
            subject=f"{type(batch).__name__} ({getattr(batch.forward_mode, 'name', batch.forward_mode)})",
        )
    if note is None:
        batch.__dict__.pop(NOTE_ATTR, None)
        return
    batch.__dict__[NOTE_ATTR] = note
    _wrap_planners()


def _planned_shape(batch: Any) -> tuple[int, int] | None:
    """The shape a backend last planned this batch for, since the guard wraps the backends."""
    return batch.__dict__.get(PLANNED_ATTR)


def _record_plan(batch: Any) -> None:
    state = getattr(batch, "__dict__", None)
    if state is not None and hasattr(batch, "batch_size"):
        state.pop(NOTE_ATTR, None)
        state[PLANNED_ATTR] = (int(batch.batch_size), _rows(batch))


def after_copy(result: Any, runner: Any, batch: Any, *args: Any, **kwargs: Any) -> None:
    """The eager runner's copy of a batch (its input buffers, the same shape) keeps the batch's plan record."""
    planned = getattr(batch, "__dict__", {}).get(PLANNED_ATTR)
    if planned is not None and result is not batch and hasattr(result, "__dict__"):
        result.__dict__[PLANNED_ATTR] = planned
    return None  # HookRegistry keeps SGLang's copy


def _forget(batch: Any) -> None:
    state = getattr(batch, "__dict__", None)
    if state is not None:
        state.pop(NOTE_ATTR, None)


def after_decision(result: Any, batch: Any, *args: Any, **kwargs: Any) -> None:
    if not _Installed.decided:  # every backend of the server exists by the first forward's decision
        _Installed.decided = True
        guard_call("G6", SITE, _wrap_planners)
    if result is False:
        guard_call("G6", SITE, _note_decision, batch)
    else:
        guard_call("G6", SITE, _forget, batch)
    return None  # HookRegistry keeps SGLang's answer


def _make_before_launch(original: Any) -> Any:
    counter = POLICY.site("G6", SITE)
    get_batch = arg_binder(original, "forward_batch")

    def before_launch(backend: Any, *args: Any, **kwargs: Any) -> None:
        batch = get_batch(args, kwargs)
        note = getattr(batch, "__dict__", {}).pop(NOTE_ATTR, None)
        if note is not None:
            run_check(counter, lambda: note)
        return None  # HookRegistry passes the arguments on unchanged

    return before_launch


def _make_planner(original: Any) -> Any:
    get_batch = arg_binder(original, "forward_batch")

    def planner(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        batch = get_batch(args, kwargs)
        if batch is not None:
            guard_call("G6", SITE, _record_plan, batch)
        return result

    return mark(planner, original)


def _wrap_planners() -> None:
    """Wrap every attention backend's planning methods so a plan records the shape it was for and clears a note.
    Done at install, at the first decision (every backend class of the server is imported by then) and at each
    note where more classes exist."""
    base = importlib.import_module(BACKEND_MODULE).AttentionBackend
    classes = [base, *subclasses(base)]
    if len(classes) == _Installed.planners_seen or _Installed.patcher is None:
        return
    for cls in classes:
        for name, original in list(vars(cls).items()):
            if name.startswith(PLANS) and inspect.isfunction(original):
                _Installed.patcher.replace(cls, name, _make_planner(original))
    _Installed.planners_seen = len(classes)


def _hooked(target: str) -> list:
    from sglang.srt.plugins.hook_registry import HookRegistry

    return HookRegistry._hooks[target]


def _install_launch_judgment(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    batch_cls = importlib.import_module(BATCH_MODULE).ForwardBatch
    backend_cls = importlib.import_module(BACKEND_MODULE).AttentionBackend
    decision = batch_cls.__dict__.get("needs_forward_metadata_init")
    launch = backend_cls.__dict__.get("forward")
    if not inspect.isfunction(decision) or "mark_forward_metadata_ready" not in batch_cls.__dict__:
        skipped.append(
            "G6 (this SGLang has no plan record on ForwardBatch: its forward skips planning on "
            "skip_attn_backend_init, which carries no shape to judge)"
        )
        return
    if not inspect.isfunction(launch):
        skipped.append("G6 (AttentionBackend has no forward of its own to judge launches at)")
        return
    _Installed.patcher = patcher
    ours = {DECISION: (after_decision, HookType.AFTER), LAUNCH: (_make_before_launch(launch), HookType.BEFORE)}
    originals = {DECISION: (batch_cls, decision), LAUNCH: (backend_cls, launch)}
    runner_module, _, copy_name = COPY.rpartition(".")
    try:  # where the eager runner copies a batch (0.5.23), the copy keeps the plan record
        runner_cls = pkgutil.resolve_name(runner_module)
        copier = runner_cls.__dict__.get(copy_name)
    except Exception:  # noqa: BLE001 -- another SGLang: its copies start without a record (the mark's shape)
        runner_cls, copier = None, None
    if inspect.isfunction(copier):
        ours[COPY] = (after_copy, HookType.AFTER)
        originals[COPY] = (runner_cls, copier)
    for target, (hook, kind) in ours.items():
        hook.__specguard_hook__ = True  # type: ignore[attr-defined]
        if not any(getattr(h, "__specguard_hook__", False) for _, h, _ in _hooked(target)):
            HookRegistry.register(target, hook, kind)

    def unhook() -> None:
        for target, (owner, original) in originals.items():
            hooks = _hooked(target)
            hooks[:] = [entry for entry in hooks if not getattr(entry[1], "__specguard_hook__", False)]
            HookRegistry._patched.discard(target)
            setattr(owner, target.rpartition(".")[2], original)
        _Installed.patcher, _Installed.planners_seen, _Installed.decided = None, 0, False

    patcher.at_restore(unhook)
    guard_call("G6", SITE, _wrap_planners)
    installed.append("G6@ForwardBatch.needs_forward_metadata_init->AttentionBackend.forward (HookRegistry)")


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    _install_launch_judgment(patcher, installed, skipped)
    try:
        planners = importlib.import_module(PLANNER_MODULE)
    except Exception as exc:  # noqa: BLE001 -- SGLang's FlashInfer backend not importable: G1's own wrappers remain
        skipped.append(f"G1@fast_prefill_plan ({type(exc).__name__}: {exc})")
        return
    if wrap_planner(patcher, planners, "fast_prefill_plan", _prefill_recorder, ("sglang.",)):
        installed.append("G1@fast_prefill_plan")
    else:
        skipped.append("G1@fast_prefill_plan (not a function in this SGLang)")

"""What vLLM derives from a serving config before any hazard applies, evaluated in the served source.

The speculative method: `SpeculativeConfig.__post_init__` fills it in when the config leaves it out, and may
replace the one given (vLLM 0.29.0 keeps only `eagle`, `eagle3`, `dflash` and `dspark` as written and infers
the rest from the draft model's name or config). The hazards are judged for the method the served source
arrives at, not the one written: a DFlash draft named `z-lab/Qwen3-8B-DFlash-b16` is DFlash however the
config spells it. Where that depends on what vLLM reads from the draft model at startup (its architectures, its
`model_type`), the method is undecided and the hazards that depend on it say so.

The evaluation runs `__post_init__` with the given fields and the config classes it constructs (the draft's
`ModelConfig`) as objects holding what they were constructed with: no model is loaded, nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from specguard.deploy.evaluator import config_evaluator
from specguard.deploy.facts import SourceFacts
from specguard.deploy.model import ServingConfig
from specguard.deploy.vllm_tree import CONFIG_PACKAGE
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.values import NOT_HANDLED, ClassRef, Function, Obj, plain

SPECULATIVE = "SpeculativeConfig"
DERIVING_METHOD = "__post_init__"


@dataclass(frozen=True)
class ServedMethod:
    """The method the served source arrives at: `method` when decided (None: no speculative config), else
    `undecided` says on what it depends."""

    method: str | None
    where: str = ""  # the statement that set it, when it is not the one written
    # what it depends on where the source leaves it undecided; `method` is then the one written (None: none is)
    undecided: str = ""
    # where undecided: the methods it may arrive at (what every path sets first, and what each branch after sets);
    # empty where one of them is not a known name
    candidates: tuple[str, ...] = ()


def served_method(cfg: ServingConfig, facts: SourceFacts) -> ServedMethod:
    spec = cfg.speculative_config
    if spec is None:
        return ServedMethod(None)
    tree = facts.tree
    package = f"{tree.package}.{CONFIG_PACKAGE}"
    cls = tree.resolve_class(package, SPECULATIVE)
    found = tree.method(cls, DERIVING_METHOD) if cls is not None else None
    module = tree.module(found[1].module) if found is not None else None
    if cls is None or found is None or module is None:
        return ServedMethod(spec.method)  # nothing derives it in this source: as written
    method, owner = found

    def constructed(ev: Any, func: Any, args: Any, kwargs: Any, node: ast.AST, frame: Any, state: Any) -> Any:
        if isinstance(func, ClassRef) and func.info.module.startswith(package):
            return Obj(func.info, {k: v for k, v in kwargs.items() if isinstance(k, str)}, defaults=True)
        return NOT_HANDLED

    target = Obj(tree.resolve_class(package, "ModelConfig"), {"model": cfg.model}, defaults=True)
    fields = {"method": None, "model": None, **spec.model_dump(exclude_none=True), "target_model_config": target}
    me = Obj(cls, fields, defaults=True, label=SPECULATIVE)
    ev = config_evaluator(tree, hook=constructed, max_depth=2, watch_attrs=("method",))
    what = f"`{SPECULATIVE}.{DERIVING_METHOD}` ({tree.relpath(module.path)})"
    try:
        _, state = ev.call_function(Function(module, method, owner), [], {}, self_value=me)
    except (OutOfBudget, RecursionError):
        return ServedMethod(spec.method, undecided=f"{what} could not be evaluated within its budget")
    value = plain(state.writes.get((id(me), "method"), spec.method))
    if not isinstance(value, str):
        draft = f"the draft model {spec.model!r}" if spec.model else "the target model"
        undecided = (
            f"the speculative method {what} derives depends on what vLLM reads from {draft} at startup "
            f"(its config), which the serving config does not decide"
        )
        return ServedMethod(spec.method, undecided=undecided, candidates=_candidates(ev.outcomes, me, spec.method))
    node = me.nodes.get("method")
    where = f"{tree.relpath(module.path)}:{node.lineno}" if value != spec.method and node is not None else ""
    return ServedMethod(value, where)


def _candidates(outcomes: list[Any], me: Obj, written: str | None) -> tuple[str, ...]:
    """The methods an undecided derivation may arrive at: the last one every path assigns (or the one written),
    and each one a branch assigns after it (0.27.0 replaces `deepseek_mtp` by `mtp` on every path, then may
    re-infer from the target's config). Empty where some assignment is not a known name."""
    assigned = [o for o in outcomes if o.site.kind == "assign" and o.detail[0] is me]
    certain = [i for i, o in enumerate(assigned) if not o.path]
    first = plain(assigned[certain[-1]].detail[1]) if certain else written
    later = [plain(o.detail[1]) for o in assigned[certain[-1] + 1 if certain else 0 :]]
    if not all(isinstance(v, str) for v in [first, *later]):
        return ()
    return tuple(dict.fromkeys([first, *later]))


def with_served_method(cfg: ServingConfig, served: ServedMethod) -> ServingConfig:
    """The config as the hazards read it: with the method the served source arrives at."""
    spec = cfg.speculative_config
    if spec is None or served.method is None or served.method == spec.method:
        return cfg
    return cfg.model_copy(update={"speculative_config": spec.model_copy(update={"method": served.method})})

"""Static evaluation of the served vLLM's code for one serving config (see `evaluator`): values, paths and
verdicts, the object model, and the evaluator itself."""

from specguard.deploy.flow.evaluator import STAR_KWARGS, Evaluator
from specguard.deploy.flow.paths import Cond, Flow, Frame, Outcome, Site, State, Verdict, merge, verdict
from specguard.evaluation.budget import OutOfBudget, run_budget
from specguard.evaluation.values import (
    NOT_HANDLED,
    UNKNOWN,
    Bound,
    ClassRef,
    EnumMember,
    Function,
    LiteralType,
    ModuleRef,
    Obj,
    Opaque,
    PyMethod,
    SuperRef,
    Token,
    TokenAttr,
    known,
)

__all__ = [
    "NOT_HANDLED",
    "STAR_KWARGS",
    "UNKNOWN",
    "Bound",
    "ClassRef",
    "Cond",
    "EnumMember",
    "Evaluator",
    "Flow",
    "Frame",
    "Function",
    "LiteralType",
    "ModuleRef",
    "Obj",
    "Opaque",
    "OutOfBudget",
    "Outcome",
    "PyMethod",
    "Site",
    "State",
    "SuperRef",
    "Token",
    "TokenAttr",
    "Verdict",
    "known",
    "merge",
    "run_budget",
    "verdict",
]

"""Static evaluation of the served vLLM's code for one serving config (see `evaluator`): the config pre-flight's
statement walker and object model, on the values, paths, verdicts, budgets, environment and exception lineage of
`specguard.evaluation`."""

from specguard.deploy.flow.evaluator import Evaluator

__all__ = ["Evaluator"]

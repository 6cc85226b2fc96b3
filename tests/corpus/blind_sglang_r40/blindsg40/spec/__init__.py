"""Speculative draft / verify orchestration built from planner, padder and runner parts."""

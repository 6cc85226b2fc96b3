"""How deep decoded data (TOML, JSON, YAML) may nest: far more than any configuration needs, far less than what
makes the recursive code that reads it (json.dumps, pydantic, merging) run out of stack."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 32
NESTED_TOO_DEEPLY = "nested too deeply"


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether dicts and lists in `value` nest more than `limit` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

"""The first clause of a message: what the concise line shows.

Rule messages read "what is wrong; why, or the fix; ...". A terminal line of ~700 characters helps no one, so the
concise and grouped formats show the message up to its first `; ` at the top level (not inside backticks, parentheses,
brackets or braces: code and asides keep their semicolons), and the other formats keep the whole message."""

from __future__ import annotations

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


def first_clause(message: str) -> str:
    depth, in_code = 0, False
    for i, char in enumerate(message):
        if char == "`":
            in_code = not in_code
        elif in_code:
            continue
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(depth - 1, 0)  # a stray `)` (an enumeration's "1)") closes nothing
        elif char == ";" and depth == 0 and message[i + 1 : i + 2] == " ":
            return message[:i]
    return message

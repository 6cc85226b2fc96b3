"""Research team: the lookahead speculative method (draft workers, batch helpers)."""

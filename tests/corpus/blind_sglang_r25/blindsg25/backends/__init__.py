"""MLA attention backends with decode-context-parallel (DCP) support."""

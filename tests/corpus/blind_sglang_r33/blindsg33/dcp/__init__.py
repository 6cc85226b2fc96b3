"""Decode-context-parallel ports of the MLA attention backends."""

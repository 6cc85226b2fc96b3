"""Decode-context-parallel extensions for the fork's MLA backends."""

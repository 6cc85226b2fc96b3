"""Decode-context-parallel (DCP) MLA decode length handling."""

"""Kernel-facing helpers (DCP lengths, MLA decode launch / plan wrappers)."""

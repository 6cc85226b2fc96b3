"""MLA attention backend variants for decode context parallelism (DCP)."""

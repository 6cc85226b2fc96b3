"""MLA attention backend extensions."""

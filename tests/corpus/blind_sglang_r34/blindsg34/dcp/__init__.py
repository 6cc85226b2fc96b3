"""Vendor port of SGLang's MLA attention backends to decode context parallelism."""

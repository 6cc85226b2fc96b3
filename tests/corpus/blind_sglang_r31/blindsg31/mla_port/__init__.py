"""Vendor port of SGLang's MLA attention backends under decode context parallel."""

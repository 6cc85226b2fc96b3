"""blindsg27: an SGLang fork carrying the "lookahead" speculative method
(research team) and DCP-aware MLA attention backends (kernel team)."""

__all__ = ["config", "spec", "runtime", "mla"]

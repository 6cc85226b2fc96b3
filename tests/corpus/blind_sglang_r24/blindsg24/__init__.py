"""blindsg24: a downstream fork's speculative-decoding and MLA-DCP patches
layered over SGLang 0.5.23 (workers, model runners, attention backends)."""

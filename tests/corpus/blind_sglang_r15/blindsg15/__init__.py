"""blindsg15: a downstream fork's speculative-decoding and MLA/DCP glue on top
of SGLang. Workers, runners and attention backends here subclass the real
SGLang classes and are registered by the fork's launcher."""

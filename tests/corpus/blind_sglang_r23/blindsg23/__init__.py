"""blindsg23: a fork's speculative-decoding and MLA/DCP attention glue on top of SGLang 0.5.23."""

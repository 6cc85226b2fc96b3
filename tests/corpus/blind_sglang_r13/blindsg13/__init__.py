"""blindsg13: a small speculative-decoding / DCP fork layer on top of SGLang."""

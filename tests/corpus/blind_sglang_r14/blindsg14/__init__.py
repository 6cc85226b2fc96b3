"""blindsg14: out-of-tree speculative-decoding and MLA/DCP extensions for SGLang.

Imports the upstream ``sglang`` package the way a downstream fork does; nothing
in here is imported by upstream.
"""

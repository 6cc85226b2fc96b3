"""blindsg21: fork-local extensions to SGLang's speculative workers, model
runners and MLA attention backends (decode context parallel, DP attention).

Everything here subclasses or wraps the upstream ``sglang.srt`` classes and is
selected through the fork's backend / worker registry overrides.
"""

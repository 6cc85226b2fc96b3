"""Fork-local speculative decoding and MLA attention code (blindsg39).

The speculative workers live in :mod:`blindsg39.draft` and the MLA attention
backends in :mod:`blindsg39.mla`.  Both are organised as mixins plus a shared
helper module, layered on top of SGLang 0.5.23 / FlashInfer 0.7.4.
"""

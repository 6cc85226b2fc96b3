"""blindsg36: a lab's speculative-decoding (draft/) and decode-context-parallel
MLA (mla/) experiments on top of SGLang 0.5.23 / FlashInfer 0.7.4.

Research code; never imported by the serving stack directly.
"""

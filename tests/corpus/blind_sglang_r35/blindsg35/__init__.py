"""blindsg35: a storefront serving fork of SGLang speculative decoding
(``serving``) and a GPU cloud's decode-context-parallel port of the MLA
attention backends (``kernels``)."""

"""Internal fork: DeepSeek-style multi-token-prediction drafting for SGLang
(``mtp``) and the MLA attention backends it runs on under decode context
parallelism (``mla_dcp``). Shared settings and small value types live in
``common``.
"""

__all__ = ["common", "mtp", "mla_dcp"]

"""blindsg42: a downstream fork layer over SGLang 0.5.23.

Speculative-decoding workers, a model runner and MLA attention backends that
subclass the upstream classes and override single hooks. Nothing here is
imported by SGLang itself; the fork's launcher selects these classes.
"""

"""blindsg40: a registry/adapter fork layer over SGLang 0.5.23.

Speculative draft/verify orchestration (``spec``) and decode-context-parallel
MLA backend ports (``dcp``) are wired together from frozen config objects
(``config``) and name/mode keyed registries (``registry``).
"""

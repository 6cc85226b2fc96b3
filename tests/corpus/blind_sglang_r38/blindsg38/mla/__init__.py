"""Kestrel MLA attention backends (TRT-LLM / CuteDSL / FlashInfer families).

Backends register themselves here by name; ``attention_registry`` hooks in
``blindsg38`` look them up when ``--attention-backend kestrel_*`` is given.
"""

from typing import Callable, Dict, Type

KESTREL_MLA_BACKENDS: Dict[str, Type] = {}


def register_mla_backend(name: str) -> Callable[[Type], Type]:
    def _register(cls: Type) -> Type:
        if name in KESTREL_MLA_BACKENDS:
            raise ValueError(f"duplicate Kestrel MLA backend {name!r}")
        KESTREL_MLA_BACKENDS[name] = cls
        return cls

    return _register


def create_kestrel_mla_backend(name: str, model_runner, **kwargs):
    return KESTREL_MLA_BACKENDS[name](model_runner, **kwargs)

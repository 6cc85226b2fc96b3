"""blindsg26: production overlay for an SGLang fork (speculative decoding + MLA).

The overlay subclasses SGLang's speculative workers, tp worker, model runner and
MLA attention backends. Everything under ``legacy`` targets the 0.5.6 branch of
the fork; the rest targets the 0.5.23 rebase (FlashInfer 0.7.4).
"""

__all__ = ["common", "spec", "runtime", "attention", "legacy"]

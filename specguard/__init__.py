"""specguard: keeps vLLM speculative decoding from breaking silently."""

__version__ = "0.1.0"

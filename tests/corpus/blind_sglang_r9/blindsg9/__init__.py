"""blindsg9: out-of-tree SGLang extensions (speculative workers, runner hooks,
MLA attention backends with decode context parallelism)."""

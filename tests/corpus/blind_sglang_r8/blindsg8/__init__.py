"""blindsg8: out-of-tree SGLang extensions (speculative workers, runner
overrides and MLA/DCP attention backends) maintained on top of SGLang."""

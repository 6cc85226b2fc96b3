"""Fork-local extensions to SGLang's speculative workers and MLA backends."""

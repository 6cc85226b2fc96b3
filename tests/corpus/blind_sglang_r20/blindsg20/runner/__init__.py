"""Fork overrides of SGLang's ModelRunner and its eager / graph runners."""

"""Fork subclasses of SGLang's ModelRunner / EagerRunner / TpModelWorker."""

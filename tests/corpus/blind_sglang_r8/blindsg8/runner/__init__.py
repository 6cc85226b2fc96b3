"""ModelRunner / EagerRunner / TpModelWorker overrides."""

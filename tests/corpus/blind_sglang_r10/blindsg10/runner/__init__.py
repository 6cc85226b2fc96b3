"""ModelRunner / TpModelWorker variants used by the fork."""

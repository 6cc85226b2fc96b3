"""Runner-side helpers: forward batches built and planned outside ModelRunner."""

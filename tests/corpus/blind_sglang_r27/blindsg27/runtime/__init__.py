"""Runner-side helpers of the fork (eager forwards of pre-padded batches)."""

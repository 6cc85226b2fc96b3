# Fork-local speculative-decoding extensions layered on vLLM's GPU worker.

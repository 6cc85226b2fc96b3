"""Thin launchers around FlashInfer's MLA decode kernels."""

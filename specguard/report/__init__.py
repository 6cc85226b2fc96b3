"""Output formats: text (ruff's `concise`), JSON (ruff's), SARIF and GitHub annotations."""

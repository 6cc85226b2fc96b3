"""Fixes: what a fix is (model), how a rule's change becomes text edits (from_cst, ast_edits, cst_edits,
import_edits), and `--fix`/`--diff` applying them with a re-check (apply)."""

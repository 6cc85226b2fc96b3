"""One static evaluator of Python for every client: the rules that judge what code computes (SG101, SG103, SG105,
SG201) and, in time, `specguard config`.

- `values`: what it computes with: known values, labelled unknowns, objects of the analyzed source;
- `paths`: undecided conditions, states and how paths join, verdicts;
- `program`: the analyzed project's modules, parsed on first use, never imported;
- `objects`, `builtins`, `evaluator`: attributes and comparisons, the builtins it evaluates, statements and calls;
- `hooks`: what a client tells it (its subject, what its pack's names mean).
"""

"""One static evaluator of Python for every client: the rules that judge what code computes (SG101, SG103, SG105,
SG201) and `specguard config`. It reads source through the program layer (`specguard/program/`) and imports no
client: what a client needs comes in through the `Semantics` and `Hooks` it hands in (pyproject.toml's contracts).

- `values`: what it computes with: known values, labelled unknowns, objects of the analyzed source;
- `paths`: undecided conditions, states and how paths join, outcomes and verdicts;
- `budget`: what an evaluation may spend (steps, work) and the largest value it may build, sized before it is built;
- `environment`: the environment variables evaluated code reads (`os.getenv`), and which of them decided a branch;
- `exceptions`: which `except` clause catches a raise;
- `program`: the analyzed project's modules, parsed on first use, never imported;
- `objects`, `builtins`: attributes and comparisons, the builtins and standard-library calls it evaluates;
- `statements`, `expressions`, `calls`: what it does with each kind of node (one mixin each), `nodes`: what it
  asks of a function's own syntax; `evaluator`: the `Evaluator` they make up, its entry points and dispatch;
- `recorded`: `raise` and `try` where a raise is recorded and does not end its path;
- `semantics`: the few rules the clients differ by, named (does a raise end its path, how paths that disagree
  join, how a loop that cannot be enumerated runs, is the serving environment read, are constructors run);
- `hooks`: what a client tells it (its subject, what its pack's names mean).

Both clients construct `evaluator.Evaluator`: the rules with the default semantics, the config pre-flight with its
own (`deploy/evaluator.py`: a raise does not end the path, every undecided test is a named condition, paths that
disagree join to unknown, a loop runs once, the serving environment is read) and a budget that counts work.
"""

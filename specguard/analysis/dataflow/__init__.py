"""A small dataflow layer for the rules: where a value can come from, and which tests make it harmless.

It knows no vLLM names. A rule describes what to track as a `FlowSpec` built from its pack (producers, annotated
or named parameters, attributes that derive one tracked value from another, reductions, and guard tests), and
the layer answers, at each call or attribute store, which tracked values reach it and by which path.

- `values`: the plain data (tracked items, specs, per-function summaries), safe to cache and send to workers;
- `walker`: the flow-sensitive walk of one function body (`ast`), with branches, loops, early exits and `match`;
- `summaries`: stage one, per module: what each function returns and which instance attributes it writes;
- `resolve`: per checked file: those summaries followed across calls and classes, bounded in depth.
"""

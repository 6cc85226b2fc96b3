"""A read-only view of Python source trees, the bottom layer both `specguard check` and `specguard config` read
through; it imports nothing of specguard but the base modules (`_files`, `errors`, `project`).

- `discover`, `ignore_files`: the files of a tree, walked beneath a held root (no link leads out);
- `reading`: one file read with its cap, decoded as Python does, parsed with `ast` within the per-file budget;
- `sparse`: a module's text reduced to its definitions, for the libcst parse of the rules;
- `modules`: module names of files, and files of modules (the checked roots, then installed packages);
- `tree`: the read model of modules, classes, functions, imports and literals, resolved by name;
- `ast_tools`, `cst_tools`, `positions`, `signatures`: small questions asked of one parsed node.
"""

"""Whether a served source is a vLLM tree at all, before any hazard is judged against it.

A hazard whose check is absent from the served source is not in it: so a folder that is not vLLM (only
`vllm/__init__.py`, random bytes, another project named `vllm`) would pass every check. What every judgement
reads must be there: the engine-argument module defining `EngineArgs.add_cli_args` (the `vllm serve` options) and
the config package naming the config classes a serving config becomes. Anything else may be missing or unreadable
in a real tree (a fork, a broken module): the hazards that need it are then not judged, naming it.
"""

from __future__ import annotations

from specguard.deploy.arguments import ENGINE_ARGS
from specguard.program.tree import ParsedModule, SourceTree

CONFIG_PACKAGE = "config"  # vllm/config (a module in old releases): where the config classes are defined or named
# The sections a serving config fills (deploy/situation.py builds each): named by every release since 0.28.0.
CONFIG_CLASSES = (
    "VllmConfig",
    "ParallelConfig",
    "CacheConfig",
    "ModelConfig",
    "CompilationConfig",
    "AttentionConfig",
    "SpeculativeConfig",
    "KVTransferConfig",
)


def _read(tree: SourceTree, module: str, relpath: str) -> tuple[ParsedModule | None, str]:
    """The parsed module, or why it is not there ("... is missing", "... cannot be read (SyntaxError: ...)")."""
    parsed = tree.module(module)
    found = tree.file_of(module)
    if parsed is not None or found is None:
        return parsed, f"{relpath} is missing"
    return None, f"{relpath} cannot be read ({tree.unreadable.get(tree.relpath(found[0]), 'unreadable')})"


def not_vllm(tree: SourceTree) -> str | None:
    """What the served tree lacks of what every judgement reads; None for a vLLM tree."""
    engine_path, engine_class, add_cli_args = ENGINE_ARGS
    engine_module = f"{tree.package}.{engine_path.removesuffix('.py').replace('/', '.')}"
    engine, why = _read(tree, engine_module, engine_path)
    if engine is None:
        return f"{why}: it defines EngineArgs.add_cli_args, the `vllm serve` options"
    cls = engine.classes.get(engine_class)
    if cls is None or tree.method(cls, add_cli_args) is None:
        return f"{engine_path} defines no {engine_class}.{add_cli_args} (the `vllm serve` options)"
    config, why = _read(tree, f"{tree.package}.{CONFIG_PACKAGE}", f"{CONFIG_PACKAGE}/__init__.py")
    if config is None:
        return f"{why}: it names the config classes ({', '.join(CONFIG_CLASSES)})"
    named = {*config.classes, *config.imports, *config.assigns}
    missing = [
        name
        for name in CONFIG_CLASSES
        if name not in named and not (config.star_imports and tree.resolve(config.name, name) is not None)
    ]
    if missing:
        where = tree.relpath(config.path)
        return f"{where} names no {', '.join(missing)} (the config classes a serving config fills)"
    return None

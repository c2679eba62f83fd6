"""The generation engines: each one's module and its place in `generator: auto`'s preference order.

A leaf module (it imports nothing of the package): `config` validates a dataset's `generator`
against it and `generate` dispatches through it, without importing each other. Adding an engine
is one module (the contract: docs/generators.md, "The engine contract") plus one `EngineInfo`
line here."""

from dataclasses import dataclass

PACKAGE = "dp_synth_assets.core.generate"
SHARED = "dp_synth_assets.core.config:ModelSettings"  # the `model:` block, shared


@dataclass(frozen=True)
class EngineInfo:
    """One generation engine's registry line.

    `module` names its module: a module of `dp_synth_assets.core.generate`, or a dotted path for
    an engine that lives elsewhere. `auto` tries the engines with a place in increasing order and
    takes the first whose estimate fits the budget, else the last one (which should be the engine
    whose cost does not grow with the joint domain); an engine without a place (None) runs only
    when a dataset names it. `settings` names its settings model: the shared
    `config.ModelSettings` (the `model:` block; with `auto` the generator is chosen at run time,
    so no key can be refused at load for not being the chosen one's) or a subclass,
    `module:Class`.
    """

    module: str        # <module> of generate/, or a dotted path
    auto: int | None   # place in auto's preference order (lowest first); None: never by auto
    settings: str = SHARED  # its settings model (module:Class, or a class of its module)


ENGINES = {
    "pgm": EngineInfo("pgm", 1),
    "parallel_pgm": EngineInfo("parallel_pgm", 2),
    "gum": EngineInfo("gum", 3),
}

"""The scan engines: each one's module (its connector, under `dp_synth_assets.infra.engines`),
its settings model and the optional feature (`extras.FEATURES`) it needs.

A scan engine runs a dataset's private scans (`engine:` in datasets.yaml; the contract:
docs/engines.md, "The scan engine contract"). A leaf module (it imports nothing of the package):
`config` validates a dataset's `engine:` through it, and `infra.engines.open_engine` opens the
engine it names, without importing each other. Adding a scan engine is one module plus one
`ScanEngineInfo` line here."""

from dataclasses import dataclass

PACKAGE = "dp_synth_assets.infra.engines"


@dataclass(frozen=True)
class ScanEngineInfo:
    """One scan engine's registry line.

    The module defines `Settings` (a subclass of `config.EngineSpec`: the keys of the `engine:`
    block beyond `type` and `schema`, with their rules, frozen), `open(settings, store,
    drop_views) -> context manager of the engine` and may define `refusal(settings, source,
    report) -> str | None` (why the engine cannot read a dataset's `source`, or run its
    `report`). `module` names it: a module of `dp_synth_assets.infra.engines`, or a dotted path;
    `settings` names its settings model (`plugins.settings_model`).
    """

    module: str                 # <module> of infra/engines/, or a dotted path
    settings: str = "Settings"  # its settings model (a class of the module, or module:Class)
    feature: str | None = None  # the optional feature (extras.FEATURES) it needs


SCAN_ENGINES = {
    "duckdb": ScanEngineInfo("duckdb"),
    "postgres": ScanEngineInfo("postgres", feature="postgres"),
    "spark": ScanEngineInfo("spark", feature="spark"),
}

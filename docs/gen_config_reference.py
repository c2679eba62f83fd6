"""The configuration reference page, rendered from the pydantic models of a datasets.yaml entry.

Defines `render() -> str`: a Markdown page with one section per model reachable from
`dp_synth_assets.core.config.DatasetSpec` (the entry, its source kinds, columns, privacy, engine,
selection, model and report blocks), then one per registered plug-in whose own settings model
(`core.plugins`) declares keys of the block beyond the shared ones (a scan engine's `engine:`
keys, a selection method's `selection:` keys). Each section holds the model's docstring and a table of its
keys: the key as written in YAML (a field's alias), its type, its default and constraints, and
its description (the field's `description`, else the comments written on and above the field in
the model's source). Nothing is written by hand, so the page cannot drift from the validator.

`python docs/gen_config_reference.py` rewrites docs/reference/configuration.md (`make docs` runs
it first); tests/test_docs.py fails when the committed page differs from `render()`.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import tokenize
import types
import typing
from enum import Enum
from pathlib import Path

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from dp_synth_assets.core import config

TITLE = "Configuration reference"
INTRO = """\
Every key of a dataset's entry, as `datasets.yaml` (under `datasets: <name>:`), a Component's
`defs.yaml` (under `attributes: datasets: <name>:`) and the notebook API's `Synthesizer(...)`
arguments take it. This page is generated from the pydantic models of
`dp_synth_assets/core/config.py` by `docs/gen_config_reference.py` (do not edit it by hand): the
types, defaults and constraints are the validator's own. Rules that involve several keys (a run
epsilon above the limit, `bins` with PrivTree, ...) are in each model's description and in
[Add a table](../add-a-table.md#checked-before-anything-is-spent).
"""


def _section_id(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment lines directly above the field and the comment on its line,
    read from the source of the class that declares the field."""
    try:
        source = inspect.cleandoc("\n" + inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    field_line = re.compile(r"^    (\w+)\s*:")
    group = ""  # the comment above a group of one-line fields written without a blank line
    for number, line in enumerate(lines, start=1):
        match = field_line.match(line)
        if not match or match.group(1) not in model.__annotations__:
            group = ""
            continue
        above = []
        previous = number - 1
        while previous >= 1 and lines[previous - 1].strip().startswith("#"):
            above.insert(0, comments.get(previous, ""))
            previous -= 1
        if above:
            group = " ".join(part for part in above if part)
        own = " ".join(part for part in above + [comments.get(number, "")] if part)
        found[match.group(1)] = own or (group if field_line.match(lines[number - 2]) else "")
    return found


def _declaring(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The class of `model`'s hierarchy that declares field `name`."""
    for klass in model.__mro__:
        if name in getattr(klass, "__annotations__", {}) and issubclass(klass, BaseModel):
            return klass
    return model


def _description(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    if field.description:
        return field.description
    klass = _declaring(model, name)
    return DESCRIPTIONS.get(f"{klass.__name__}.{name}") or _field_comments(klass).get(name, "")


def _is_model(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_text(tp: object) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)]
        return " | ".join(parts)
    if origin is list or (origin is tuple and Ellipsis in args):
        return f"list of {_type_text(args[0])}"
    if origin is tuple:
        items = {_type_text(a) for a in args}
        return f"pair of {items.pop()}" if len(args) == 2 and len(items) == 1 else \
            "(" + ", ".join(_type_text(a) for a in args) + ")"
    if origin is dict:
        return f"mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if _is_model(tp):
        return f"[{tp.__name__}](#{_section_id(tp)})"
    if isinstance(tp, type):
        if issubclass(tp, Enum):
            return " | ".join(f"`{m.value}`" for m in tp)
        return {"str": "text", "int": "integer", "float": "number", "bool": "boolean",
                "date": "date", "datetime": "datetime"}.get(tp.__name__, tp.__name__)
    return str(tp).replace("typing.", "")


def _constraints(field: FieldInfo) -> list[str]:
    """The bounds, lengths and patterns pydantic checks, from the field and from its type's
    `Annotated` metadata (e.g. `Annotated[int, Field(ge=1)]` inside a union)."""
    metadata = list(field.metadata)
    stack = [field.annotation]
    while stack:
        tp = stack.pop()
        if typing.get_origin(tp) is typing.Annotated:
            metadata.extend(typing.get_args(tp)[1:])
            stack.append(typing.get_args(tp)[0])
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(tp))
    out = []
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    for item in metadata:
        for attr, symbol in symbols.items():
            value = getattr(item, attr, None)
            if value is not None and isinstance(item, (annotated_types.BaseMetadata, FieldInfo)):
                out.append(f"{symbol} {value:,}" if isinstance(value, int) else f"{symbol} {value}")
        if isinstance(item, annotated_types.MinLen):
            out.append(f"length >= {item.min_length}")
        if isinstance(item, annotated_types.MaxLen):
            out.append(f"length <= {item.max_length}")
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"matches `{pattern}`")
    out = list(dict.fromkeys(out))
    if "length >= 1" in out and "length <= 1" in out:
        out = [c for c in out if not c.startswith("length")] + ["one character"]
    return out


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)) and not value:
        return "empty"
    if isinstance(value, list):
        return f"`{json.dumps(value)}`"
    if isinstance(value, int):
        return f"`{value:,}`".replace(",", "_") if value >= 100_000 else f"`{value}`"
    return f"`{value}`"


def _models_of(tp: object) -> list[type[BaseModel]]:
    if _is_model(tp):
        return [tp]
    return [m for a in typing.get_args(tp) for m in _models_of(a)]


def _reachable(root: type[BaseModel]) -> list[type[BaseModel]]:
    order: list[type[BaseModel]] = []
    todo = [root]
    while todo:
        model = todo.pop(0)
        if model in order:
            continue
        order.append(model)
        for field in model.model_fields.values():
            todo.extend(_models_of(field.annotation))
    return order


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# Descriptions of the keys whose model holds neither a `description` nor a comment that reads as
# one (a model's docstring may describe them together). A comment of the model replaces none of
# these; tests/test_docs.py fails when a key here is no longer a field of its model.
DESCRIPTIONS = {
    "DatasetSpec.source": "where the rows are read: one of the four source kinds below",
    "DatasetSpec.columns": "every column to synthesize, by name, with its kind and public domain",
    "DatasetSpec.privacy": "the run budget and the lifetime limit",
    "DatasetSpec.method": "the selection method: a registered method's name (absyn, privsyn, "
                          "mst, aim, ppsyn, manual) or `auto` (absyn, or MST by public facts)",
    "DatasetSpec.generator": "the generation engine: a registered engine's name (pgm, "
                             "parallel_pgm, gum) or `auto` (chosen by estimated memory and time)",
    "DatasetSpec.engine": "where the private scans run: a type name, or a block with its settings",
    "DatasetSpec.rows": "rows of the synthetic table: `same` (the noisy row count) or a number",
    "DatasetSpec.seed": "fixes tie-breaks and row sampling, not the noise",
    "DatasetSpec.schedule": "a cron: resynthesize on a schedule, when the budget covers a run",
    "DatasetSpec.on_source_change": "`resynthesize`: a change of the source starts a run, when "
                                    "the budget covers it and `min_interval` has passed",
    "DatasetSpec.min_interval": "the least time between automatic resyntheses (s, m, h or d)",
    "DatasetSpec.selection": "settings of the selection stage",
    "DatasetSpec.model": "settings of the model and synthetic stages",
    "DatasetSpec.report": "the owner-only utility report; off without this block",
    "DatasetSpec.description": "shown on the dataset's assets",
    "_SourceBase.asset": "the key of the host's asset that writes this source (a list, or one "
                         "string with `/` between the parts)",
    "TableSource.table": "`[schema.]table`, each part letters, digits and underscores",
    "ParquetSource.parquet": "a path or glob (relative to datasets.yaml), or a URI the engine reads",
    "CsvSource.csv": "a local file or glob, relative to datasets.yaml",
    "CsvSource.header": "the first line names the columns",
    "CsvSource.delimiter": "the field separator",
    "CsvSource.quote": "the quote character",
    "CsvSource.escape": "the character escaping a quote inside a quoted field; unset: the quote, "
                        "doubled",
    "CsvSource.null": "field values read as NULL",
    "CsvSource.columns": "the names in file order: required without a header, overrides one",
    "AttachSource.attach": "what DuckDB's ATTACH takes",
    "AttachSource.type": "DuckDB's database type",
    "AttachSource.table": "`schema.table` inside the attached database",
    "ColumnSpec.kind": "the column's kind",
    "ColumnSpec.categories": "the kept values; unset: discovered with DP",
    "ColumnSpec.rare": "merge rare categories into one code (`merge`, `filter_combine`) or not",
    "ColumnSpec.theta": "`rare: merge`: the share of the noisy total under which a category is rare",
    "ColumnSpec.other_label": "how the code of values outside `categories` decodes",
    "ColumnSpec.other": "`false`: `categories` is exhaustive, no other code",
    "ColumnSpec.bounds": "[low, high] (dates as ISO strings); unset: learned with DP",
    "ColumnSpec.binning": "unset: `quantile` when the bounds are learned, `uniform` when declared",
    "ColumnSpec.bins": "unset: 16 for quantile bins, 31 for uniform ones",
    "ColumnSpec.nullable": "a code for NULL; unset: true when the domain is learned or `missing` "
                           "is given",
    "ColumnSpec.missing": "source values read as NULL (e.g. `\"?\"`)",
    "ColumnSpec.type": "the column's SQL type in the synthetic table (see Add a table, Column types)",
    "ColumnSpec.fallback": "the value of a NULL, an uncastable value or a value outside an "
                           "exhaustive list in a column that cannot hold it",
    "Privacy.epsilon": "the budget of one synthesis run",
    "Privacy.delta": "the delta of one run",
    "Privacy.limit": "the lifetime limit of the dataset's privacy unit",
    "Privacy.budget_group": "a name entries share to spend one budget (required when they read "
                            "the same source)",
    "Limit.epsilon": "the lifetime epsilon",
    "Limit.delta": "the lifetime delta",
    "EngineSpec.type": "the scan engine: a registered engine's name (duckdb, postgres, spark)",
    "EngineSpec.schema_": "postgres: the schema where the encoded view is created",
    "SelectionSettings.score_share": "the rho share of the selection mechanisms (scores, the "
                                     "exponential mechanism); unset: the method's default",
    "SelectionSettings.one_way_share": "the rho share of the noisy 1-way marginals; unset: the "
                                       "method's default",
    "ModelSettings.max_seconds": "generator auto: the estimated fitting time the stage may use",
    "ModelSettings.max_memory_mb": "generator auto: the estimated peak memory the stage may use",
}


# what each model is, seen from datasets.yaml (the class name is the model's)
WHERE = {
    "DatasetSpec": "an entry: `datasets: <name>:`",
    "TableSource": "`source:` a table of the warehouse (or of the scan engine)",
    "ParquetSource": "`source:` Parquet files",
    "CsvSource": "`source:` a CSV file",
    "AttachSource": "`source:` a table of an attached database",
    "ColumnSpec": "`columns: <column>:`",
    "Privacy": "`privacy:`",
    "Limit": "`privacy.limit:`",
    "EngineSpec": "`engine:` (or just its type: `engine: postgres`)",
    "SelectionSettings": "`selection:`",
    "ModelSettings": "`model:`",
    "ReportSettings": "`report:` (the owner-only utility report)",
}


def _plugin_models() -> list[tuple[str, str, str, type[BaseModel], list[str]]]:
    """(heading, section id, where, model, its own keys) of each registered plug-in whose
    settings model declares keys beyond the shared block it extends, in registry order."""
    from dp_synth_assets.core import methods, scan_engines
    from dp_synth_assets.core.plugins import settings_model

    kinds = (("Scan engine", "engine", "type", scan_engines.SCAN_ENGINES, scan_engines.PACKAGE),
             ("Selection method", "selection", "method", methods.METHODS, methods.PACKAGE))
    out = []
    for kind, block, chosen_by, registry, package in kinds:
        for name in registry:
            model = settings_model(registry, name, package, kind.lower())
            own = [f for f in model.model_fields if f in model.__dict__.get("__annotations__", {})]
            if own:
                where = (f"`{block}:` keys of `{chosen_by}: {name}` (`{model.__module__}`)")
                out.append((f"{kind} {name}", f"{block}-{name}", where, model, own))
    return out


def _section(heading: str, section: str, where: str, model: type[BaseModel],
             keys: list[str]) -> list[str]:
    out = [f"## {heading}" + " {#" + section + "}", "", where, ""]
    doc = inspect.getdoc(model)
    inherited = model.__mro__[1].__doc__ if len(model.__mro__) > 1 else None
    if doc and model.__doc__ is not None and model.__doc__ != inherited:
        out += [doc, ""]
    elif doc and model.__doc__ is None and inherited:
        out += [inspect.cleandoc(inherited), ""]
    out += ["| key | type | default | constraints | description |",
            "| --- | --- | --- | --- | --- |"]
    for name in keys:
        field = model.model_fields[name]
        key = field.alias or name
        out.append("| " + " | ".join([
            f"`{key}`", _cell(_type_text(field.annotation)), _default_text(field),
            _cell(", ".join(_constraints(field))),
            _cell(_description(model, name, field))]) + " |")
    return out + [""]


def render() -> str:
    """The whole page, as Markdown."""
    out = [f"# {TITLE}", "", INTRO]
    for model in _reachable(config.DatasetSpec):
        where = WHERE.get(model.__name__, f"`{model.__name__}`")
        out += _section(model.__name__, _section_id(model), where, model,
                        list(model.model_fields))
    for heading, section, where, model, keys in _plugin_models():
        out += _section(heading, section, where, model, keys)
    return "\n".join(out).rstrip() + "\n"


PAGE = Path(__file__).parent / "reference" / "configuration.md"


if __name__ == "__main__":
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE}")

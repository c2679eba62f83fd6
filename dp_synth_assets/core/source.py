"""The source: reading a dataset's rows where they live, counting what its values map to, and
the holdout split. Everything here runs inside the scan engine and returns the schema or
aggregates, never rows; a failure's public text depends on the spec and the schema only
(`SourceError`), and no value of a row makes a run fail (`count_fallbacks`).
"""

from dataclasses import dataclass
from pathlib import Path

import duckdb

from .config import (UNKNOWN_ENTRY, AttachSource, ColumnSpec, CsvSource, DatasetSpec,
                     ParquetSource, TableSource, is_uri)
from .domain import boolean_value, cast_type, is_null_condition
from .scans import as_engine
from .sql import ident, literal, qualified, same_identifier, sql


class SourceError(ValueError):
    """The source table cannot be used (absent, unreadable, a declared column missing).

    `public` is what may be published: it depends on the spec and the source's schema only.
    `detail` holds what depends on the data (which validation check failed, DuckDB's own
    message, which can quote a value): it is part of the full message, `str(error)`, which
    belongs in the private log only (dp_synth_assets/private_log.py)."""

    def __init__(self, public: str, detail: str = ""):
        super().__init__(f"{public}: {detail}" if detail else public)
        self.public = public
        self.detail = detail


def source_relation(spec: DatasetSpec, base_dir: Path) -> str:
    """The SQL relation reading a dataset's source (a table, a Parquet glob, a CSV file, or a
    table of an attached database: see `attach_source`)."""
    if isinstance(spec.source, AttachSource):
        return ident(attached_catalog(spec)) + "." + qualified(spec.source.table)
    if isinstance(spec.source, ParquetSource) and is_uri(spec.source.parquet):
        return f"read_parquet({literal(spec.source.parquet)})"  # read by the engine as written
    path = source_path(spec, base_dir)
    if path is None:
        return qualified(spec.source.table)
    if isinstance(spec.source, ParquetSource):
        return f"read_parquet({literal(path)})"
    return csv_relation(spec.source, path, tuple(spec.columns))


def csv_relation(src: CsvSource, path: Path, declared: tuple[str, ...] = ()) -> str:
    """read_csv with the declared dialect and every column as VARCHAR, nothing sniffed: the
    names are `src.columns` or the header line (schema, read here with Python's csv module);
    the declared kinds set the types through the encodings' TRY_CAST. `declared`: the dataset's
    column names, the only ones a refusal of the header may quote."""
    names = src.columns if src.columns is not None else csv_header(src, path, declared)
    columns = "{" + ", ".join(f"{literal(n)}: 'VARCHAR'" for n in names) + "}"
    nulls = "[" + ", ".join(literal(v) for v in src.null) + "]"
    return sql("read_csv", path=literal(path), header="true" if src.header else "false",
               delimiter=literal(src.delimiter), quote=literal(src.quote),
               escape=literal(src.escape if src.escape is not None else src.quote),
               nulls=nulls, columns=columns)


def csv_header(src: CsvSource, path: Path, declared: tuple[str, ...] = ()) -> list[str]:
    """The column names on the first line of a CSV source (of its first file, for a glob). A
    header whose names are not all distinct identifiers is refused; the refusal quotes only the
    `declared` names among them (the line is a row of data when the file has no header)."""
    import csv

    files = sorted(path.parent.glob(path.name))
    if not files:
        raise SourceError(f"the CSV source {path} does not exist; check `source.csv`")
    escape = src.escape if src.escape not in (None, src.quote) else None
    with open(files[0], newline="", encoding="utf-8-sig") as f:
        names = next(csv.reader(f, delimiter=src.delimiter, quotechar=src.quote,
                                escapechar=escape, doublequote=escape is None), None)
    if not names or any(not n.strip() for n in names) or len(set(names)) != len(names):
        # the line itself stays private: when the file has no header, it is a row of data
        raise SourceError(f"the header line of {files[0]} does not name every column once; fix "
                          "it, or declare `source.columns` (and `header: false`)",
                          detail=f"it reads {names}")
    same = same_identifier(names)
    if same:
        named = [repr(n) for group in same for n in group if n in declared]
        shown = f" (among them the declared {', '.join(named)})" if named else ""
        raise SourceError(
            f"the header line of {files[0]} has column names that differ only in case{shown}, "
            f"which DuckDB, like SQL, reads as one name even quoted, so the file cannot be "
            f"read: rename them in the file, or name every column yourself in file order with "
            f"`source.columns` (the header line is then skipped)",
            detail=f"names that are one identifier: {same}")
    return names


def attached_catalog(spec: DatasetSpec) -> str:
    """The name an attached source database gets in DuckDB: derived from its connection string,
    so two datasets on one database share it."""
    import hashlib

    digest = hashlib.sha256(f"{spec.source.type}:{spec.source.attach}".encode()).hexdigest()[:12]
    return f"dp_source_{digest}"


def attach_source(con: duckdb.DuckDBPyConnection, spec: DatasetSpec, base_dir: Path,
                  dataset: str) -> None:
    """Attach the source database of an `attach:` source to this connection (READ_ONLY; once
    per connection), loading DuckDB's extension for its type first. Other sources need nothing.
    The aggregate queries then run in DuckDB over the attached tables; the postgres and mysql
    extensions push projections and filters down to the database and stream the rows."""
    src = spec.source
    if not isinstance(src, AttachSource):
        return
    catalog = attached_catalog(spec)
    if con.execute(sql("database_attached"), [catalog]).fetchone()[0]:
        return
    target = src.attach
    if src.type in ("duckdb", "sqlite") and not Path(target).is_absolute():
        target = str((base_dir / target).resolve())
    try:
        if src.type != "duckdb":
            con.execute(sql("load_extension", extension=src.type))
    except duckdb.Error as e:
        raise SourceError(
            f"dataset {dataset!r}: DuckDB cannot load its {src.type!r} extension. Install it "
            f"once where DuckDB can download it (`INSTALL {src.type}` in DuckDB), or put it in "
            "DuckDB's extension_directory", detail=str(e)) from None
    try:
        con.execute(sql("attach_source", target=literal(target), catalog=ident(catalog),
                        type=src.type))
    except duckdb.Error as e:
        raise SourceError(
            f"dataset {dataset!r}: cannot attach its source database ({src.type}). Check "
            f"`source.attach` of {spec.entry}", detail=str(e)) from None


def training_relation(spec: DatasetSpec, base_dir: Path, dataset: str) -> str:
    """The rows the synthesizer may see: the whole source, or, with `report.holdout` > 0, the
    source without its held-out rows (`holdout_relation`). Every private read of the pipeline
    (validation, preprocessing, the encoded view, hence the marginals) goes through it, so the
    utility report's ML test rows were never seen by any mechanism. A row's side depends only on
    its own content, so adding or removing one row changes the training set by at most that row:
    the DP guarantee of the synthesis holds for the training rows, and the held-out rows are
    never released."""
    relation = source_relation(spec, base_dir)
    if spec.report is None or spec.report.holdout <= 0:
        return relation
    return _split(relation, spec, dataset, keep="NOT")


def holdout_relation(spec: DatasetSpec, base_dir: Path, dataset: str) -> str | None:
    """The held-out rows (owner-only utility report), or None without a holdout."""
    if spec.report is None or spec.report.holdout <= 0:
        return None
    return _split(source_relation(spec, base_dir), spec, dataset, keep="")


def _split(relation: str, spec: DatasetSpec, dataset: str, keep: str) -> str:
    return sql("holdout_split", source=relation, keep=keep, salt=literal(dataset),
               threshold=str(int(round(spec.report.holdout * 1_000_000))))


def source_path(spec: DatasetSpec, base_dir: Path) -> Path | None:
    """The file (or glob) of a Parquet/CSV source or of an attached DuckDB/SQLite database,
    resolved against `base_dir`; None for tables, database servers and Parquet URIs (read by
    the scan engine where they are, `config.is_uri`)."""
    src = spec.source
    if isinstance(src, TableSource) or (isinstance(src, AttachSource)
                                        and src.type not in ("duckdb", "sqlite")):
        return None
    if isinstance(src, ParquetSource) and is_uri(src.parquet):
        return None
    path = Path(src.attach if isinstance(src, AttachSource) else
                src.parquet if isinstance(src, ParquetSource) else src.csv)
    return path if path.is_absolute() else (base_dir / path).resolve()


def source_available(spec: DatasetSpec, base_dir: Path) -> bool:
    """Whether a file source exists (tables and URIs are checked when a run reads them)."""
    path = source_path(spec, base_dir)
    return path is None or any(path.parent.glob(path.name))


def describe_source(con, relation: str, dataset: str,
                    entry: str = UNKNOWN_ENTRY) -> dict[str, str]:
    """Column name -> SQL type of the source, reading no rows.

    Args:
        con: a DuckDB connection or a scan engine (core/scans.py).
        relation: the source relation.
        dataset: the dataset's name, for the error.
        entry: where the dataset is declared (`DatasetSpec.entry`), for the error.

    Raises:
        SourceError: no such table or file, or it cannot be opened; its public text names the
            entry to fix, the engine's message is kept for the private log.
    """
    engine = as_engine(con)
    try:
        return engine.describe(relation)
    except engine.errors as e:
        raise SourceError(
            f"dataset {dataset!r}: cannot read its source {relation}: no such table or file, or "
            f"it cannot be opened. Check `source:` of {entry} (table name, or the "
            "Parquet/CSV path)", detail=str(e)) from None


@dataclass(frozen=True)
class Fallbacks:
    """What `count_fallbacks` found (private: it goes to the dataset's private log only): the
    source's row count and, per column, how many values read as NULL or took the column's
    fallback code (`ColumnSpec` states the rule), as (column, what, rows) for nonzero counts."""

    rows: int
    counts: tuple[tuple[str, str, int], ...]

    def report(self) -> str:
        """The owner's summary: one line per nonzero count, or that every value was read."""
        lines = [f"the source has {self.rows} rows" + (" (the run uses noise only)"
                                                         if self.rows == 0 else "")]
        lines += [f"column {column!r}: {rows} {what}" for column, what, rows in self.counts]
        if not self.counts:
            lines.append("every value was read as declared")
        return "\n".join(lines)


def count_fallbacks(con, relation: str, columns: dict[str, ColumnSpec],
                    dataset: str) -> Fallbacks:
    """Count, in one aggregate query, the source's rows and the values each column reads as NULL
    or maps to its fallback code: a NULL / `missing` / NaN in a column that is not nullable, a
    value that does not cast to the kind (NULL when nullable, else the fallback), a value outside
    an exhaustive category list. Nothing is refused: the encoding maps every value (core/domain.py),
    so whether a run succeeds never depends on the rows; the counts are for the owner's log."""
    counts, labels = [], []
    for i, (name, spec) in enumerate(columns.items()):
        col, is_null = ident(name), is_null_condition(name, spec.missing, spec.kind)
        becomes = "NULL" if spec.is_nullable else "the fallback code"
        target = cast_type(spec)
        if spec.kind == "boolean":
            counts.append(sql("count_unreadable", value=boolean_value(name), is_null=is_null,
                              alias=f"cast_{i}"))
            labels.append((name, f"values that do not read as booleans took {becomes}"))
        elif target is not None:
            counts.append(sql("count_uncastable", column=col, is_null=is_null, sql_type=target,
                              alias=f"cast_{i}"))
            labels.append((name, f"values that do not cast to {target} took {becomes}"))
        if spec.kind == "categorical" and not spec.other:
            from .domain import sql_text

            listed = "[" + ", ".join(literal(sql_text(c)) for c in spec.categories) + "]"
            counts.append(sql("count_outside", column=col, is_null=is_null, categories=listed,
                              alias=f"outside_{i}"))
            labels.append((name, "values outside the exhaustive `categories` took the fallback "
                                 "code"))
        if not spec.is_nullable:
            counts.append(sql("count_null", is_null=is_null, alias=f"null_{i}"))
            labels.append((name, "NULLs (or `missing` markers, NaN) took the fallback code, the "
                                 "column not being nullable"))
    engine = as_engine(con)
    query = sql("source_fallbacks", counts="".join(", " + c for c in counts), source=relation)
    try:
        row = engine.fetchone(query)
    except engine.errors as e:
        raise SourceError(f"dataset {dataset!r}: the source could not be scanned",
                          detail=str(e)) from None
    found = tuple((column, what, int(n)) for (column, what), n in zip(labels, row[1:]) if n)
    return Fallbacks(int(row[0]), found)

"""The read of the public lists that `categories: {from: ...}` names
(`core.config.CategoriesFrom`): each column's values from a public table of the warehouse,
read before the `preprocessed` stage charges anything, never from the dataset's source.

`read_public_lists` returns them for `core.config.with_public_categories`, which validates
them as written lists; a table or column that is not there is refused here, naming the entry,
the table and the fix."""

import duckdb

from ..core.config import MAX_PUBLIC_CATEGORIES, DatasetSpec, PublicListError
from ..core.sql import ident, qualified, sql


def read_public_lists(con: duckdb.DuckDBPyConnection, spec: DatasetSpec) -> dict[str, list]:
    """Column -> the values of its `from` column (text, NULLs as None; at most
    MAX_PUBLIC_CATEGORIES + 1 of them, so that a longer list is refused without reading it
    all), for every `categories: {from: ...}` column of `spec`, read on `con` (the warehouse).

    Raises:
        PublicListError: a `from` table is not in the warehouse, or has no such column; the
            message names the dataset's entry, the column, the table and the fix.
    """
    lists = {}
    for name, column in spec.columns.items():
        public = column.categories_from
        if public is None:
            continue
        where = f"{spec.entry}, column {name!r}: `categories: {{from: {public.name}}}`"
        try:
            described = con.execute(sql("describe_source", source=qualified(public.table)))
            columns = [row[0] for row in described.fetchall()]
        except duckdb.CatalogException:
            raise PublicListError(
                f"{where}: the table {public.table} is not in the warehouse. Load the public "
                f"dimension table there first (with `asset:` beside `table:` when a Dagster "
                f"asset writes it), or fix `from`; nothing was charged") from None
        if public.column.lower() not in {c.lower() for c in columns}:  # as DuckDB matches
            raise PublicListError(
                f"{where}: the table {public.table} has no column {public.column!r}. Fix "
                f"`from`; nothing was charged")
        rows = con.execute(sql("public_categories", column=ident(public.column),
                               table=qualified(public.table),
                               limit=MAX_PUBLIC_CATEGORIES + 1)).fetchall()
        lists[name] = [row[0] for row in rows]
    return lists

-- A table's comment (the synthetic table's run stamp), no row when the table is missing.
SELECT comment FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?

SELECT count(*) > 0 FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?

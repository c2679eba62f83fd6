-- Whether this connection already has a database attached under the catalog name ?.
SELECT count(*) FROM duckdb_databases() WHERE database_name = ?

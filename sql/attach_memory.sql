-- A private in-memory database on a caller's connection for the API's working objects,
-- writable even when the caller's connection is read-only (duckdb.connect(path, read_only=True)).
ATTACH ':memory:' AS {catalog} (READ_WRITE)

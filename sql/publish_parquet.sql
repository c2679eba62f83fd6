-- Replace a synthetic table by its Parquet copy (inside the caller's transaction: a family's
-- tables are published together).
CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet({path})

-- Replace the synthetic table with decoded rows cast to the declared column types.
CREATE OR REPLACE TABLE {table} AS SELECT {casts} FROM {relation}

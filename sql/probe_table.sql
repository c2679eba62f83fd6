-- A probe table, created and dropped to check that the warehouse can be written (writes.py).
CREATE TABLE {table} AS SELECT 1 AS probe

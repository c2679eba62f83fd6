-- PostgreSQL. Whether the schema %s holds the table %s (read from the catalog tables with the
-- statement's own snapshot, so a table another session just created is seen).
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relname = %s)

-- PostgreSQL. Whether the schema holds a ledger (its events table).
SELECT to_regclass(%s) IS NOT NULL

-- PostgreSQL. The mirrored head: one row per write transaction that added events, written in
-- that transaction (row count, hash of the last row, the chain's starting hash).
CREATE TABLE {schema}.ledger_head (
    rows BIGINT PRIMARY KEY,
    head TEXT NOT NULL,
    genesis TEXT NOT NULL,
    ts TEXT NOT NULL
)

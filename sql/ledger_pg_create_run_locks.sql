-- PostgreSQL. The run lock of each dataset (infra/runs.py): the run holding it and its process.
-- Unlike the ledger's tables, rows come and go.
CREATE TABLE {schema}.run_locks (
    dataset TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    since TEXT NOT NULL
)

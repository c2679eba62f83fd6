-- PostgreSQL. Hold a dataset for a run (after `ledger_pg_run_lock_free` of a stale holder).
INSERT INTO {schema}.run_locks (dataset, run_id, owner, since) VALUES (%s, %s, %s, %s)

-- PostgreSQL. Free a dataset.
DELETE FROM {schema}.run_locks WHERE dataset = %s

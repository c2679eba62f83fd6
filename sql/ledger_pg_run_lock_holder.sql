-- PostgreSQL. The run holding a dataset, if any.
SELECT run_id, owner FROM {schema}.run_locks WHERE dataset = %s

-- PostgreSQL. Record the hash chain's secret.
INSERT INTO {schema}.ledger_meta (id, key, value) VALUES (%s, 'genesis', %s)

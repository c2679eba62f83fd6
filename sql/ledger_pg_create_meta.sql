-- PostgreSQL. The ledger's settings, appended: the hash chain's secret is the value of the last
-- 'genesis' row (a second one is only appended by `migrate`, into a ledger without events).
CREATE TABLE {schema}.ledger_meta (id BIGINT PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL)

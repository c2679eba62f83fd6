-- PostgreSQL. The processes ('host:pid:start') that hold a presence lock while they live, so
-- that a reservation of one whose lock is gone is stale from any host.
CREATE TABLE {schema}.ledger_owners (owner TEXT PRIMARY KEY, since TEXT NOT NULL)

-- PostgreSQL. Record a process that holds its presence lock (once).
INSERT INTO {schema}.ledger_owners (owner, since)
SELECT %s, %s WHERE NOT EXISTS (SELECT 1 FROM {schema}.ledger_owners WHERE owner = %s)

-- SQLite. The ledger's settings (the hash chain's secret, key 'genesis'), written once.
CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)

-- SQLite. Record the hash chain's secret, once, when the ledger is created.
INSERT INTO ledger_meta (key, value) VALUES ('genesis', ?)

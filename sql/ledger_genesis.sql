-- SQLite. The hash chain's secret.
SELECT value FROM ledger_meta WHERE key = 'genesis'

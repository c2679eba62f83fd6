-- SQLite. The CREATE statement of the ledger's events table, as the file holds it (a ledger
-- written before the `limit` kind existed refuses that kind, and is upgraded).
SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'privacy_ledger'

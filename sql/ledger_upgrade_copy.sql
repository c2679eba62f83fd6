-- SQLite. The rows of the old events table, unchanged and in order, into the new one.
INSERT INTO privacy_ledger SELECT * FROM privacy_ledger_upgraded ORDER BY id

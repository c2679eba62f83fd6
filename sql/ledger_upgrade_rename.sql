-- SQLite. Upgrading the events table: the old table steps aside, its rows are copied unchanged
-- into the new one (ledger_upgrade_copy.sql), then it is dropped with its triggers and index.
ALTER TABLE privacy_ledger RENAME TO privacy_ledger_upgraded

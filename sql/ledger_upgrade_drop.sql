-- SQLite. The old events table, once its rows are copied (its triggers and index go with it).
DROP TABLE privacy_ledger_upgraded

-- SQLite. The column names of privacy_ledger (a ledger from before the hash chain lacks some).
SELECT name FROM pragma_table_info('privacy_ledger')

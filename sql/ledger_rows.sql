-- SQLite. Every event in id order; {columns} is resources/ledger.py's _COLUMNS.
SELECT {columns}, hash FROM privacy_ledger ORDER BY id

-- SQLite. Write-ahead logging (persistent in the file); returns the journal mode now in force.
PRAGMA journal_mode = WAL

-- SQLite. How long a statement waits for another process's lock before failing.
PRAGMA busy_timeout = {milliseconds}

-- SQLite. A trigger that makes the database refuse every {event} (UPDATE or DELETE) of {table}'s
-- rows; {name} is {table}_append_only_u or _d.
CREATE TRIGGER IF NOT EXISTS {name} BEFORE {event} ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END

-- Per-column validity flags of a source relation, one boolean per check; no counts are returned.
-- {checks} is a list of `bool_or(<condition>) AS <name>` expressions built from check_*.sql.
SELECT {checks} FROM {source}

-- One side of the report's holdout split of a source: a row is held out when the hash of its own
-- content (salted with the dataset's name) falls below the holdout share, so the split of a row
-- never depends on any other row. {keep} is "NOT" for the rows the synthesizer may see. The row
-- is hashed as row(*COLUMNS(*)), not through a table alias that a column of the same name would
-- shadow (the same hash as the alias's struct); `IS [NOT] true`, as DuckDB refuses NOT around
-- *COLUMNS (the hash is never NULL).
(SELECT * FROM {source} WHERE (hash(row(*COLUMNS(*)), {salt}) % 1000000 < {threshold}) IS {keep} true)

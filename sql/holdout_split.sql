-- One side of the report's holdout split of a source: a row is held out when the hash of its own
-- content (salted with the dataset's name) falls below the holdout share, so the split of a row
-- never depends on any other row. {keep} is "NOT" for the rows the synthesizer may see.
(SELECT * FROM {source} AS src WHERE {keep} (hash(src, {salt}) % 1000000 < {threshold}))

-- The number of rows of a relation (the checks' public synthetic table).
SELECT count(*) FROM {source}

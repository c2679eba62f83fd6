-- Some columns of a relation, at most {limit} rows (ALL: every row).
SELECT {columns} FROM {source} LIMIT {limit}

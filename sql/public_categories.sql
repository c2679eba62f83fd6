-- The values of a public table's column, the list of a `categories: {from: ...}` column (read
-- before anything is charged; never the private source), in the column's order, at most
-- {limit} rows.
SELECT CAST({column} AS VARCHAR) AS value FROM {table} ORDER BY {column} NULLS LAST LIMIT {limit}

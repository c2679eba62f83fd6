-- The cells of stored marginals, selected by GROUPING_ID; absent cells have count 0.
SELECT {columns}, gid, n FROM {table} WHERE list_contains(?, gid)

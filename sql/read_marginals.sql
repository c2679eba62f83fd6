-- The cells of stored marginals (bookkeeping columns c<i>, gid, n), selected by clique key;
-- absent cells have count 0. {columns} ends with a comma when not empty.
SELECT {columns}gid, n FROM {table} WHERE list_contains(?, gid)

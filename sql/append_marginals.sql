-- Add the counts of one count_marginals.sql query to a marginal table (columns matched by
-- name: the c<i> a query does not group stay NULL).
INSERT INTO {table} BY NAME {counts}

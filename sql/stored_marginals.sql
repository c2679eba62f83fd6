-- Which marginals a marginal table holds: their clique keys.
SELECT DISTINCT gid FROM {table}

-- Which marginals a marginal table holds: their GROUPING_IDs.
SELECT DISTINCT gid FROM {table}

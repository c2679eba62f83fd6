-- Count more marginals of the encoded view in one scan and add them to a marginal table
-- (marginals counted on demand for an adaptive method; gid as in marginals.sql).
INSERT INTO {table}
SELECT {columns}, GROUPING_ID({columns}) AS gid, CAST(count(*) AS BIGINT) AS n
FROM {view}
GROUP BY GROUPING SETS ({grouping_sets})

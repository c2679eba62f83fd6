-- Counts of many marginals of an encoded relation in one scan, returned rather than stored (the
-- checks read the public synthetic table this way). gid as in marginals.sql.
SELECT {columns}, GROUPING_ID({columns}) AS gid, CAST(count(*) AS BIGINT) AS n
FROM {source}
GROUP BY GROUPING SETS ({grouping_sets})

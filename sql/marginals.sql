-- Exact counts of many marginals in one scan of the encoded codes (private zone).
-- gid is GROUPING_ID over all columns: a set bit marks a column that is not in the grouping set.
CREATE OR REPLACE TABLE {table} AS
SELECT {columns}, GROUPING_ID({columns}) AS gid, CAST(count(*) AS BIGINT) AS n
FROM {view}
GROUP BY GROUPING SETS ({grouping_sets})

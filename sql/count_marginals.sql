-- Counts of several marginals of an encoded relation in one GROUPING SETS scan. The relation's
-- columns (user names) are renamed to bookkeeping names c<i> first, so the result's columns
-- c<i>, gid and n never collide with a user's: gid is the clique's key, the positions i whose
-- GROUPING(c<i>) is 0 joined by commas ({key}); {columns} ends with a comma when not empty.
SELECT {columns}{key} AS gid, CAST(count(*) AS BIGINT) AS n
FROM (SELECT {renames} FROM {source})
GROUP BY GROUPING SETS ({grouping_sets})

-- The synthetic table's per-column figures for the checks, in one scan of the public table: its
-- rows and the counts of {aggregates} (check_count_where.sql, one per column and figure).
SELECT count(*) AS "rows"{aggregates} FROM {source}

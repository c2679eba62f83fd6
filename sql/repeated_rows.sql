-- Rows of an encoded relation that repeat an earlier row (all rows minus the distinct rows),
-- counted by sorting: in key order a row repeats exactly when its key equals the previous row's.
-- DuckDB's sort spills to disk, so its memory stays within the connection's memory_limit at any
-- row count (a count(DISTINCT) or GROUP BY holds a hash table that, under a limit, could not).
-- {key} is one integer per row, never NULL (the codes packed exactly, or their hash for huge
-- domains).
SELECT count(*) FROM (
  SELECT k, lag(k) OVER (ORDER BY k) AS previous FROM (SELECT {key} AS k FROM {source})
) WHERE k = previous

-- Rows of a column whose value reads as NULL (NULL, a `missing` marker, NaN).
sum(CASE WHEN {is_null} THEN 1 ELSE 0 END) AS {alias}

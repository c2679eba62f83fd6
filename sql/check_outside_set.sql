-- Present values of one column outside its set domain, judged on its distinct values: a GROUP BY
-- (which DuckDB runs on the Parquet dictionary), then {outside} (check_outside.sql) per value.
(SELECT coalesce(sum(n) FILTER (WHERE {outside}), 0)
 FROM (SELECT {column}, count(*) AS n FROM {source} GROUP BY {column})) AS {alias}

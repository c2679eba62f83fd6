-- Present values of one column outside its set domain, judged on its distinct values: a GROUP BY
-- (which DuckDB runs on the Parquet dictionary), then {outside} (check_outside.sql) per value.
-- The count takes a bookkeeping name (`dp_synth:`), which no column can have.
(SELECT coalesce(sum("dp_synth:n") FILTER (WHERE {outside}), 0)
 FROM (SELECT {column}, count(*) AS "dp_synth:n" FROM {source} GROUP BY {column})) AS {alias}

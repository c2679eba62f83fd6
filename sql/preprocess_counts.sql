-- Exact aggregates of several preprocessing tasks from the keys table (see preprocess_keys.sql),
-- one grouping set per task key k<i>. GROUPING(k<i>) = 0 marks the result rows of set i, so
-- `task` is the position of the 0 in the list of GROUPING flags. Text keys (value counts) come
-- back in `label`, integer keys (buckets, cells) in `code`; each set's NULL-key group is dropped.
SELECT task, label, code, n FROM (
  SELECT list_position([{groupings}], 0) - 1 AS task, {label} AS label, {code} AS code,
         count(*) AS n
  FROM {keys_table}
  GROUP BY GROUPING SETS ({sets})
) WHERE label IS NOT NULL OR code IS NOT NULL

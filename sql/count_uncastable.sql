-- Rows of a column whose present value does not cast to the kind's SQL type (they read as NULL).
sum(CASE WHEN NOT ({is_null}) AND TRY_CAST({column} AS {sql_type}) IS NULL THEN 1 ELSE 0 END) AS {alias}

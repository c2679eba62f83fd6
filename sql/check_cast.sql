bool_or(NOT ({is_null}) AND TRY_CAST({column} AS {sql_type}) IS NULL) AS {alias}

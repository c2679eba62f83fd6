bool_or({column} IS NOT NULL AND TRY_CAST({column} AS {sql_type}) IS NULL) AS {alias}

CASE WHEN {is_null} THEN {null_code} WHEN CAST({column} AS BOOLEAN) THEN 1 ELSE 0 END

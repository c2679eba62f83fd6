CASE WHEN {column} IS NULL THEN {null_code}
     ELSE coalesce(list_position({categories}, CAST({column} AS VARCHAR)) - 1, {other_code}) END

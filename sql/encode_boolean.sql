-- A boolean column: a value that does not cast to BOOLEAN reads as NULL (TRY_CAST never fails).
CASE WHEN {is_null} OR TRY_CAST({column} AS BOOLEAN) IS NULL THEN {null_code}
     WHEN TRY_CAST({column} AS BOOLEAN) THEN 1 ELSE 0 END

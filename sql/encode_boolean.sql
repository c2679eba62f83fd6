-- A boolean column: a value that does not read as a boolean (sql/boolean_value.sql) is NULL.
CASE WHEN {is_null} OR ({value}) IS NULL THEN {null_code}
     WHEN ({value}) THEN 1 ELSE 0 END

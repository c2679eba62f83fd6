-- Rows of a boolean column whose present value does not read as a boolean (they read as NULL).
sum(CASE WHEN NOT ({is_null}) AND ({value}) IS NULL THEN 1 ELSE 0 END) AS {alias}

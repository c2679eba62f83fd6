-- A value of the synthetic table the checks count as NULL: NULL, or NaN in a float column.
({column} IS NULL{nan})

bool_or({column} IS NULL) AS {alias}

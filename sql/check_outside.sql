bool_or(NOT ({is_null}) AND NOT list_contains({categories}, CAST({column} AS VARCHAR))) AS {alias}

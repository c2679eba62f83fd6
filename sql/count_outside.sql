-- Rows of a categorical column whose present value is outside its exhaustive category list.
sum(CASE WHEN NOT ({is_null}) AND NOT list_contains({categories}, CAST({column} AS VARCHAR)) THEN 1 ELSE 0 END) AS {alias}

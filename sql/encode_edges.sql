CASE WHEN {is_null} THEN {null_code}
     ELSE CAST(len(list_filter({interior}, lambda edge: edge <= {value})) AS INTEGER) END

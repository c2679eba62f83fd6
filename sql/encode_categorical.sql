CASE WHEN {is_null} THEN {null_code}
     WHEN list_contains({categories}, CAST({column} AS VARCHAR))
          THEN list_position({categories}, CAST({column} AS VARCHAR)) - 1
     WHEN list_contains({rare}, CAST({column} AS VARCHAR)) THEN {rare_code}
     ELSE {other_code} END

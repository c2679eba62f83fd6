CASE WHEN {column} IS NULL THEN {null_code}
     ELSE least(greatest(({value} - {low}) * {bins} // {span}, 0), {last_bin}) END

CASE WHEN {is_null} THEN {null_code}
     ELSE least(greatest(({value} - {low}) * {bins} // {span}, 0), {last_bin}) END

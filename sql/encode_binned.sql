CASE WHEN {column} IS NULL THEN {null_code}
     ELSE least(greatest(CAST(floor(({value} - {low}) / {width}) AS INTEGER), 0), {last_bin}) END

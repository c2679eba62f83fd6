CASE WHEN {is_null} THEN {null_code}
     ELSE least(greatest(CAST(floor(({value} - {low}) / {width}) AS INTEGER), 0), {last_bin}) END

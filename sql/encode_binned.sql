-- A float / timestamp column's uniform bin. The value is clamped to [low, high] in floating point
-- BEFORE the cast to INTEGER, so no value (huge, +-inf) can overflow it; NULL, NaN and values
-- that do not cast take the null code.
CASE WHEN {is_null} OR {value} IS NULL THEN {null_code}
     ELSE least(CAST(floor((least(greatest({value}, {low}), {high}) - {low}) / {width}) AS INTEGER),
                {last_bin}) END

-- An integer / DATE column's uniform bin in exact integer arithmetic: (x - low) * bins // span.
-- The value (an integral DOUBLE) is clamped to [low, high] in floating point BEFORE the cast to
-- {wide} (BIGINT, or HUGEINT when span * bins needs more than 62 bits), so nothing overflows.
CASE WHEN {is_null} OR {value} IS NULL THEN {null_code}
     ELSE CAST((CAST(least(greatest({value}, {low}), {high}) AS {wide}) - {low}) * {bins} // {span}
               AS INTEGER) END

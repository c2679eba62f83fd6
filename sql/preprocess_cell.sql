-- PrivTree key: the value's cell among 2^depth uniform cells over [low, high], clamped.
CASE WHEN {v} IS NOT NULL
     THEN least(greatest(CAST(floor(({v} - {low}) / {width}) AS BIGINT), 0), {last}) END

-- PrivTree key: the value's cell among 2^depth uniform cells over [low, top]; the value is
-- clamped to [low, top] in floating point BEFORE the cast, so no value (huge, +-inf) overflows.
CASE WHEN {v} IS NOT NULL
     THEN least(CAST(floor((least(greatest({v}, {low}), {top}) - {low}) / {width}) AS BIGINT),
                {last}) END

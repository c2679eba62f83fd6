-- Calendar-descent key (DP bounds of a datetime): the value's hour cell, 1 + the hours since
-- 1900-01-01 ({first} is that hour counted from 1970), with cell 0 before 1900 and {last} from
-- 2102 on. {v} is days since 1970 (a DOUBLE); 1e-7 hours absorbs its rounding at an hour's
-- start. Clamped in floating point BEFORE the cast, so no value (far dates, +-inf) overflows.
CASE WHEN {v} IS NOT NULL
     THEN CAST(least(greatest(floor({v} * 24 + 1e-7) - ({first}) + 1, 0), {last}) AS BIGINT) END

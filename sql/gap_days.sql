-- A later timestamp minus an earlier one, in days (a DOUBLE), for a `gap` histogram: the
-- difference of the epoch seconds first, so a whole number of seconds divides exactly as the
-- public bucket edges do (days since 1970 subtracted would round it). {later} and {earlier}
-- are the columns TRY_CAST to TIMESTAMP; NULL when either is NULL or infinite.
CASE WHEN isfinite({later}) AND isfinite({earlier})
     THEN (epoch({later}) - epoch({earlier})) / 86400.0 END

-- A datetime as days since 1970-01-01, a DOUBLE (whole days for DATE): {value} is the column
-- TRY_CAST to the declared DATE / TIMESTAMP; +-infinity become +-inf, NULL stays NULL.
CASE WHEN isfinite({value}) THEN epoch({value}) / 86400.0
     WHEN {value} > {epoch} THEN CAST('inf' AS DOUBLE)
     WHEN {value} < {epoch} THEN CAST('-inf' AS DOUBLE) END

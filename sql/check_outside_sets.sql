-- The checks' out-of-domain counts of the columns with a set domain, one check_outside_set.sql
-- subquery each.
SELECT {counts}

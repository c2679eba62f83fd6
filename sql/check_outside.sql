-- A present value outside the declared domain: not NULL, and {inside} (check_in_set.sql,
-- check_between.sql) does not hold; a value that does not read as the domain's type is outside.
(NOT {is_null} AND NOT coalesce({inside}, false))

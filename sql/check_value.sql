bool_or(NOT ({is_null}) AND ({value}) IS NULL) AS {alias}

bool_or({is_null}) AS {alias}

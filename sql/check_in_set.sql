-- A value, read as the declared type ({value}), among the domain's values.
({value} IN ({values}))

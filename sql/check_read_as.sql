-- A value read as {type} (NULL when it does not cast).
TRY_CAST({column} AS {type})

-- One count of the checks' scan (check_aggregates.sql): the rows where {column} is not NULL.
count({column}) AS {alias}

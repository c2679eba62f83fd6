-- One count of the checks' scan (check_aggregates.sql): the rows where {condition} holds.
count(*) FILTER (WHERE {condition}) AS {alias}

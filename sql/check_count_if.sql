-- One count of the checks' scan (check_aggregates.sql): the rows where {condition} holds.
count_if({condition}) AS {alias}

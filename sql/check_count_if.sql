-- One count of the checks' scan (check_aggregates.sql): the rows where {condition} holds. Not
-- count_if, which gives NULL when every row's condition is NULL (one synthetic row whose float
-- column is NULL: isnan(NULL)).
count(*) FILTER (WHERE {condition}) AS {alias}

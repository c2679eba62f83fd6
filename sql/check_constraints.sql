-- The declared constraints' check: the rows of the public synthetic table, and for each
-- constraint the rows where it fails ({counts}: check_count_if.sql over NOT (condition); a NULL
-- operand makes the condition NULL, which is not a failure, as in a SQL CHECK).
SELECT count(*) AS "rows"{counts} FROM {source}

-- How many rows the source has, and per column how many values read as NULL or take the
-- column's fallback code (private: for the owner's log only). {counts}: count_*.sql expressions.
SELECT count(*) AS source_rows{counts} FROM {source}

-- A table's rows as their integer codes, as a relation to read from (a subquery: the checks and
-- the utility report read the synthetic Parquet copy through it). {expressions} as in
-- encode_view.sql.
(SELECT {expressions} FROM {source})

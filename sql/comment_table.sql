-- Stamp a table with the run that wrote it (the synthetic table: its run id).
COMMENT ON TABLE {table} IS {comment}

COPY {table} TO {path} (FORMAT parquet)

-- Load an installed DuckDB extension (the postgres, mysql or sqlite scanner of an attach source).
LOAD {extension}

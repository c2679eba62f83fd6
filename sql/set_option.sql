-- Set a DuckDB option for this connection.
SET {name} = {value}

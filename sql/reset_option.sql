-- Reset a DuckDB option to its default.
RESET {name}

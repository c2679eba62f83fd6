-- Create a warehouse table from the rows of a registered Arrow table.
CREATE OR REPLACE TABLE {table} AS SELECT * FROM {relation}

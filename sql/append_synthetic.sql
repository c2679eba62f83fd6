-- Append one more chunk of decoded rows, cast to the declared column types.
INSERT INTO {table} SELECT {casts} FROM {relation}

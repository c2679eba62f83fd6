-- Append one more chunk of decoded rows, cast to the source's column types.
INSERT INTO {table} SELECT {casts} FROM {relation}

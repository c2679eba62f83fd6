-- Column names and types of a source relation (schema only; reads no rows).
DESCRIBE SELECT * FROM {source}

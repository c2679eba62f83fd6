-- True when the source has at least one row (a boolean, never the count).
SELECT EXISTS (SELECT 1 FROM {source})

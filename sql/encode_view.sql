-- The encoded view of a dataset: every column as its integer code (private zone, not a copy).
CREATE OR REPLACE VIEW {view} AS SELECT {expressions} FROM {source}

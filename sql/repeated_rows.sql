-- Rows of an encoded relation that repeat an earlier row: all rows minus the distinct rows.
-- {key} is one integer per row (the codes packed exactly, or their hash for huge domains).
SELECT count(*) - count(DISTINCT {key}) FROM {source}

-- The number of rows of a relation: the checks' public synthetic table, or the private source
-- whose count only feeds a Gaussian mechanism (preprocess.noisy_row_count).
SELECT count(*) FROM {source}

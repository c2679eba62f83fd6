-- A uniform sample of at most {rows} rows of a relation, the same rows for the same seed
-- (the owner-only utility report's bounded read).
SELECT * FROM {relation} USING SAMPLE reservoir({rows} ROWS) REPEATABLE ({seed})

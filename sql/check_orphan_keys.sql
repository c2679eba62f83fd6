-- A family's synthetic tables: child rows whose foreign key {fk} is NULL or matches no parent
-- key {key}, and parent keys that are NULL or repeated (public: both tables are synthetic).
SELECT
    (SELECT count(*) FROM {children} AS c
     WHERE c.{fk} IS NULL OR NOT EXISTS (SELECT 1 FROM {parents} AS p WHERE p.{key} = c.{fk})),
    (SELECT count(*) - count(DISTINCT {key}) FROM {parents})

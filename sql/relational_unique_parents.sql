-- The parents of a relation, one row per key (private): the rows that share a key are one
-- family's, and one of them is kept by {drawn} (sql/relational_draw.sql at bound 1, never by the
-- rows' values); a row without a key is dropped. Nothing is refused: whether a source's keys are
-- unique decides nothing that is published, not even whether the run succeeds.
CREATE OR REPLACE VIEW {view} AS {drawn}

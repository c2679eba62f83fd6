-- The bounded child view of a relation (private: it feeds DP mechanisms only): at most
-- {max_children} children per foreign key, drawn by {drawn} (sql/relational_draw.sql, never by
-- a child's values), each joined to its parent's measured columns ({parent_columns}); children
-- whose foreign key {fk} matches no parent's key {key} (orphans) belong to no family and are
-- dropped.
CREATE OR REPLACE VIEW {view} AS
SELECT d.*{parent_columns}
FROM ({drawn}) AS d JOIN {parents} AS p ON d.{fk} = p.{key}

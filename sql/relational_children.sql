-- The bounded child view of a relation (private: it feeds DP mechanisms only). Each child whose
-- foreign key {fk} matches a parent's key {key} (orphans are dropped: they belong to no family),
-- at most {max_children} per parent, joined to its parent's measured columns ({parent_columns}).
-- Which children are kept never depends on a child's values: within a family, each child gets
-- its position in storage order (dp_synth_rank), the children are drawn in the order of the MD5
-- of (public seed, foreign key, position), and the first {max_children} are kept. Removing or
-- adding another family changes neither the positions within this family nor its draw.
CREATE OR REPLACE VIEW {view} AS
WITH placed AS (
    SELECT c.*, row_number() OVER () AS dp_synth_position FROM {children} AS c
), ranked AS (
    SELECT placed.*,
           row_number() OVER (PARTITION BY {fk} ORDER BY dp_synth_position) AS dp_synth_rank
    FROM placed
), drawn AS (
    SELECT ranked.*,
           row_number() OVER (PARTITION BY {fk} ORDER BY
               md5({seed} || '/' || CAST({fk} AS VARCHAR) || '/' || CAST(dp_synth_rank AS VARCHAR)),
               dp_synth_rank) AS dp_synth_draw
    FROM ranked
)
SELECT d.* EXCLUDE (dp_synth_position, dp_synth_rank, dp_synth_draw){parent_columns}
FROM drawn AS d JOIN {parents} AS p ON d.{fk} = p.{key}
WHERE d.dp_synth_draw <= {max_children}

-- The parents of a relation, one row per key (private: it feeds DP mechanisms only). A key is a
-- family's identity: the rows that share it are one family's, and one of them is kept, drawn in
-- the order of the MD5 of (public seed, key, position among the rows holding that key in storage
-- order), so which one never depends on the rows' other values. Rows without a key belong to no
-- family and are dropped. Nothing is refused: whether a source's keys are unique decides nothing
-- that is published, not even whether the run succeeds.
CREATE OR REPLACE VIEW {view} AS
WITH placed AS (
    SELECT p.*, row_number() OVER () AS dp_synth_position FROM {parents} AS p
    WHERE p.{key} IS NOT NULL
), ranked AS (
    SELECT placed.*,
           row_number() OVER (PARTITION BY {key} ORDER BY dp_synth_position) AS dp_synth_rank
    FROM placed
), drawn AS (
    SELECT ranked.*,
           row_number() OVER (PARTITION BY {key} ORDER BY
               md5({seed} || '/' || CAST({key} AS VARCHAR) || '/' || CAST(dp_synth_rank AS VARCHAR)),
               dp_synth_rank) AS dp_synth_draw
    FROM ranked
)
SELECT d.* EXCLUDE (dp_synth_position, dp_synth_rank, dp_synth_draw) FROM drawn AS d
WHERE d.dp_synth_draw = 1

-- At most {bound} rows of {rows} per value of {group} (private: it feeds DP mechanisms only);
-- rows without a value of {group} belong to no family and are dropped. Which rows are kept never
-- depends on their values: each row gets its position among the rows of its group in storage
-- order (dp_synth_rank), the rows are drawn in the order of the MD5 of (public seed {seed},
-- group value, position), and the first {bound} are kept. Removing or adding another group's
-- rows changes neither the positions within this group nor its draw.
SELECT d.* EXCLUDE (dp_synth_position, dp_synth_rank, dp_synth_draw) FROM (
    WITH placed AS (
        SELECT r.*, row_number() OVER () AS dp_synth_position FROM {rows} AS r
        WHERE r.{group} IS NOT NULL
    ), ranked AS (
        SELECT placed.*,
               row_number() OVER (PARTITION BY {group} ORDER BY dp_synth_position)
                   AS dp_synth_rank
        FROM placed
    )
    SELECT ranked.*,
           row_number() OVER (PARTITION BY {group} ORDER BY
               md5({seed} || '/' || CAST({group} AS VARCHAR) || '/' || CAST(dp_synth_rank AS VARCHAR)),
               dp_synth_rank) AS dp_synth_draw
    FROM ranked
) AS d
WHERE d.dp_synth_draw <= {bound}

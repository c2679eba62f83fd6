-- The parent view of a relation (private: it feeds DP mechanisms only): every parent row with
-- its bounded children count {children_column} (0..max_children) from the bounded child view.
CREATE OR REPLACE VIEW {view} AS
SELECT p.*, CAST(coalesce(b.dp_synth_n, 0) AS BIGINT) AS {children_column}
FROM {parents} AS p
LEFT JOIN (SELECT {fk} AS dp_synth_k, count(*) AS dp_synth_n FROM {bounded} GROUP BY {fk}) AS b
    ON p.{key} = b.dp_synth_k

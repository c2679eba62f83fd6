-- DP bounds key, refined: the value's public bucket b (see preprocess_bucket.sql: {bucket}) times
-- {sub} plus its part among {sub} equal parts of that bucket (the outer, unbounded buckets are
-- one part: 0). {edges} is the list of bucket edges (1-based: bucket b spans edges[b] ..
-- edges[b + 1]); the part is clamped to 0..{sub} - 1 in floating point before the cast.
CASE WHEN {v} IS NOT NULL THEN
  ({bucket}) * {sub} + CASE WHEN ({bucket}) IN (0, {outer}) THEN 0 ELSE
    CAST(least(greatest(floor(({v} - {edges}[({bucket})])
                              / ({edges}[({bucket}) + 1] - {edges}[({bucket})]) * {sub}), 0),
               {sub} - 1) AS BIGINT) END
END

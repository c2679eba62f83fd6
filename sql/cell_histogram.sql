-- Present values in 2^depth uniform cells over [low, high], clamped (private: PrivTree input).
SELECT least(greatest(CAST(floor((v - {low}) / {width}) AS BIGINT), 0), {last}) AS cell, count(*) AS n
FROM (SELECT {value} AS v FROM {source} WHERE NOT ({is_null})) WHERE v IS NOT NULL
GROUP BY 1

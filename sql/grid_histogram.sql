-- Present values bucketed by how many public bucket edges are <= the value (private).
SELECT len(list_filter({candidates}, lambda c: c <= v)) AS bucket, count(*) AS n
FROM (SELECT {value} AS v FROM {source} WHERE NOT ({is_null})) WHERE v IS NOT NULL
GROUP BY 1

-- A family's synthetic tables: how many parents have each number of children (0 included).
SELECT coalesce(n, 0) AS children, count(*) AS parents
FROM {parents} AS p
LEFT JOIN (SELECT {fk} AS k, count(*) AS n FROM {children} GROUP BY {fk}) AS c ON p.{key} = c.k
GROUP BY ALL ORDER BY children

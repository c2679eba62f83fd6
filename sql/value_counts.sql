-- Exact counts of each present value of one column (private: feeds a DP mechanism only).
SELECT CAST({column} AS VARCHAR) AS value, count(*) AS n
FROM {source} WHERE NOT ({is_null}) GROUP BY 1

-- A content summary of a PostgreSQL relation for change detection, written in PostgreSQL's
-- dialect and not translated (DuckDB's hash(...) has no PostgreSQL equivalent: core/scans.py).
-- Each row's text (ROW(r.*) as PostgreSQL prints it: NULL and '' differ, numbers print exactly)
-- is digested by md5; the summary is the row count and the exact (numeric) sums of the
-- digest's two 64-bit halves. A sum does not depend on the rows' order, and it changes when a
-- row is added, removed or changed (unless 128-bit digests collide). Private: it is only ever
-- an input of HMAC-SHA256 under the installation's secret (dp_synth_assets/core/change.py).
SELECT count(*) || ':'
       || coalesce(sum(CAST(CAST('x' || substr(digest, 1, 16) AS bit(64)) AS bigint)), 0) || ':'
       || coalesce(sum(CAST(CAST('x' || substr(digest, 17, 16) AS bit(64)) AS bigint)), 0)
FROM (SELECT md5(CAST(ROW(r.*) AS text)) AS digest FROM {source} AS r) AS digests

-- A content summary of a Spark relation for change detection, written in Spark SQL and not
-- translated (DuckDB's hash(...) has no Spark equivalent: core/scans.py). {rows} is the
-- relation's rows (sql/read_columns.sql translated to Spark). Each row's text is its JSON
-- (to_json of all its columns by name: strings quoted and escaped, NULL written as null and
-- so distinct from '' and from 'null', doubles printed exactly, timestamps to the microsecond
-- with the offset), digested by md5; the summary is the row count and the exact (DECIMAL) sums
-- of the digest's two 64-bit halves. A sum does not depend on the rows' order or on how Spark
-- partitions them, and it changes when a row is added, removed or changed (unless 128-bit
-- digests collide). Private: it is only ever an input of HMAC-SHA256 under the installation's
-- secret (dp_synth_assets/core/change.py).
SELECT concat_ws(':', CAST(count(*) AS STRING),
       CAST(coalesce(sum(CAST(conv(substr(digest, 1, 16), 16, 10) AS DECIMAL(38, 0))), 0)
            AS STRING),
       CAST(coalesce(sum(CAST(conv(substr(digest, 17, 16), 16, 10) AS DECIMAL(38, 0))), 0)
            AS STRING))
FROM (SELECT md5(to_json(struct(*), map(
        'ignoreNullFields', 'false',
        'timestampFormat', "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
        'timestampNTZFormat', "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
        'dateFormat', 'yyyy-MM-dd'))) AS digest
      FROM ({rows}) AS r) AS digests

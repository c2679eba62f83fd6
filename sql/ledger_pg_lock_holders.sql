-- PostgreSQL. Who holds an advisory lock (keys as pg_locks shows them): backend pid, client
-- address and application name.
SELECT a.pid, coalesce(host(a.client_addr), 'local'), a.application_name
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
    SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = %s

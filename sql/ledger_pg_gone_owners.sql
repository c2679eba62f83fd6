-- PostgreSQL. Of the owners asked about (%s: their names, then the matching presence keys),
-- those that registered a presence lock and whose lock no session holds: their process is gone.
SELECT o.owner
FROM {schema}.ledger_owners AS o
JOIN unnest(%s::text[], %s::bigint[]) AS asked (owner, objid) ON asked.owner = o.owner
WHERE NOT EXISTS (
    SELECT 1 FROM pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = %s AND l.objid::bigint = asked.objid)

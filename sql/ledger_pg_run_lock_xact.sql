-- PostgreSQL. The transaction-level advisory lock of one dataset's run lock.
SELECT pg_advisory_xact_lock(%s, %s)

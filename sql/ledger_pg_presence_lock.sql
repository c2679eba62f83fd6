-- PostgreSQL. The session-level advisory lock a process holds while it lives (its presence).
SELECT pg_advisory_lock(%s, %s)

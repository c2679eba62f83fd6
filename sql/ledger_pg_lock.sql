-- PostgreSQL. Try the transaction-level advisory lock that serializes a write (released by
-- COMMIT or ROLLBACK).
SELECT pg_try_advisory_xact_lock(%s, %s)

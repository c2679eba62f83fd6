-- The statements of a scan engine's session-scoped views (core/scans.py SparkEngine), by the
-- view's store name, so an engine of another process creates them again in its own session.
CREATE TABLE IF NOT EXISTS {table} (view VARCHAR PRIMARY KEY, statement VARCHAR)

-- Keep (or replace) the statement of one engine view (engine_views.sql).
INSERT OR REPLACE INTO {table} VALUES (?, ?)

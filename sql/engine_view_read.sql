-- The statement of one engine view (engine_views.sql), if it was kept.
SELECT statement FROM {table} WHERE view = ?

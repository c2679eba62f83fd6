-- Drop a view if it exists (a scan engine's encoded view, before it is created again).
DROP VIEW IF EXISTS {view}

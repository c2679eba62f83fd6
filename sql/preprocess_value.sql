-- A row's value for one preprocessing task: NULL when it reads as NULL or is a `missing` marker.
CASE WHEN NOT ({is_null}) THEN {value} END

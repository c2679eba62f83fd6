-- A PrivTree bin: how many interior edges are <= the value (a DOUBLE compared with DOUBLEs, no
-- cast: +-inf land in the last / first bin).
CASE WHEN {is_null} OR {value} IS NULL THEN {null_code}
     ELSE CAST(len(list_filter({interior}, lambda edge: edge <= {value})) AS INTEGER) END

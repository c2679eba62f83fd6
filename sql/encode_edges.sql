-- A PrivTree bin: how many interior edges are <= the value, as a sum of comparisons of DOUBLEs
-- ({comparisons}: `CAST(e1 <= v AS INTEGER) + ...`, 0 without interior edges; no cast: +-inf
-- land in the last / first bin). No lambda: a lambda's parameter would shadow a source column
-- of the same name inside {value}.
CASE WHEN {is_null} OR {value} IS NULL THEN {null_code}
     ELSE CAST({comparisons} AS INTEGER) END

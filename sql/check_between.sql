-- A value, read as {type}, within the domain's bounds, inclusive ({value}: that read; a missing
-- bound is the read value itself, no limit).
({value} BETWEEN {low} AND {high})

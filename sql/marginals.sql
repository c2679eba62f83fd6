-- The (empty) table of exact marginals (private zone), filled by append_marginals.sql. Its
-- columns are bookkeeping names only (core/marginals.py MarginalTable): c<i> the code of the
-- i-th column of the plan, gid the clique's key (its column positions, "3,17"), n the count.
CREATE OR REPLACE TABLE {table} ({columns}, gid VARCHAR, n BIGINT)

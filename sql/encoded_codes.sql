-- The codes of an encoded view copied once into a temporary table of narrow integer types
-- (private, connection-local, dropped after use), for the marginals' GROUPING SETS query.
CREATE OR REPLACE TEMP TABLE {codes} AS SELECT {casts} FROM {view}

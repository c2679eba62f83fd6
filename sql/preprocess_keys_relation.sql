-- The keys of preprocess_keys.sql as a subquery instead of a temporary copy, for scan engines
-- that group the expressions in place (core/scans.py: `copies` is False).
(SELECT {keys} FROM (SELECT {values} FROM {source}) AS preprocess_values) AS preprocess_keys

-- A content fingerprint of a source relation: an order-independent sum of row hashes.
-- Only a digest of it is ever stored (the sensor cursor / data version), never the value.
SELECT CAST(sum(hash(t)) AS VARCHAR) FROM {source} AS t

-- A content summary of a source relation for change detection: an order-independent sum of row
-- hashes. Private: it is only ever an input of HMAC-SHA256 under the installation's secret
-- (dp_synth_assets/core/change.py), whose result stays in the private zone.
SELECT CAST(sum(hash(t)) AS VARCHAR) FROM {source} AS t

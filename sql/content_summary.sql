-- A content summary of a source relation for change detection: an order-independent sum of row
-- hashes. Private: it is only ever an input of HMAC-SHA256 under the installation's secret
-- (dp_synth_assets/core/change.py), whose result stays in the private zone. The row is hashed as
-- row(*COLUMNS(*)), not through a table alias that a column of the same name would shadow (the
-- same hash as the alias's struct, so summaries taken before are unchanged).
SELECT CAST(sum(hash(row(*COLUMNS(*)))) AS VARCHAR) FROM {source}

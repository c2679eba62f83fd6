-- PostgreSQL. The hash chain's secret (the last one recorded), and the id of its row.
SELECT value, id FROM {schema}.ledger_meta WHERE key = 'genesis' ORDER BY id DESC LIMIT 1

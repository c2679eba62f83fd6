-- PostgreSQL. The latest mirrored head.
SELECT rows, head, genesis FROM {schema}.ledger_head ORDER BY rows DESC LIMIT 1

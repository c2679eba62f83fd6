-- PostgreSQL. Mirror the head, in the transaction that wrote the events.
INSERT INTO {schema}.ledger_head (rows, head, genesis, ts) VALUES (%s, %s, %s, %s)

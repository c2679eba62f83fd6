-- PostgreSQL. Every event in id order; {columns} is core/ledger.py's _COLUMNS.
SELECT {columns}, hash FROM {schema}.privacy_ledger ORDER BY id

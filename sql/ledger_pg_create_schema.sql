-- PostgreSQL. The schema that holds the privacy ledger's tables (core/ledger_store.py).
CREATE SCHEMA IF NOT EXISTS {schema}

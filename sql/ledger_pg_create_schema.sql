-- PostgreSQL. The schema that holds the privacy ledger's tables (infra/ledger_store.py).
CREATE SCHEMA IF NOT EXISTS {schema}

-- PostgreSQL. The ledger's rows of one run of one privacy unit.
CREATE INDEX privacy_ledger_unit_run ON {schema}.privacy_ledger (unit, run_id)

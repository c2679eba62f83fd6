-- SQLite. The ledger's rows of one run of one privacy unit.
CREATE INDEX IF NOT EXISTS privacy_ledger_unit_run ON privacy_ledger (unit, run_id)

-- SQLite. Append one event (columns in the order of resources/ledger.py's _COLUMNS, then hash).
INSERT INTO privacy_ledger
    (id, ts, unit, source, dataset, run_id, stage, mechanism, kind, rho, delta_extra, parameters,
     owner, hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
